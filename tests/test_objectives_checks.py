"""The `catsim verify` checks contributed by catsim.objectives pass within their tolerances."""

from catsim.checks import objectives


def test_objectives_checks_pass():
    results = list(objectives.run(quick=True))
    assert len(results) == 5
    for result in results:
        assert result.passed, result
