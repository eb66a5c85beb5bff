"""Test-suite settings: Hypothesis draws the same examples on every run (derandomize), so a
property test passes or fails reproducibly on every machine and in CI instead of finding a new
example now and then; widen `max_examples` locally to search harder."""

from hypothesis import settings

settings.register_profile("catsim", derandomize=True, deadline=None)
settings.load_profile("catsim")
