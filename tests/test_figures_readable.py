"""Figures a reader can read: each test draws a figure from the data the committed one was made
from (or a tiny synthetic grid) and inspects the matplotlib Figure the plot function saves — its
legend words, layout, colours, labels and whether any text falls outside the figure or on another."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

from matplotlib.text import Text  # noqa: E402

FIGURES = Path(__file__).resolve().parents[1] / "figures"


@pytest.fixture
def drawn(monkeypatch):
    """draw(module, function, *args): call `function(*args)` with `module.save_figure` replaced, and
    return the Figure it would have saved (drawn, so text extents are final)."""
    def draw(module, function, *args, **kwargs):
        figs = []
        monkeypatch.setattr(module, "save_figure", lambda fig, path, **_: figs.append(fig) or Path(path))
        function(*args, **kwargs)
        assert len(figs) == 1
        figs[0].canvas.draw()
        return figs[0]
    return draw


@pytest.fixture(scope="module")
def maze():
    return json.loads((FIGURES / "maze-study" / "results.json").read_text())


def _texts(fig):
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def _outside(fig) -> list[str]:
    """What of the drawn figure (its tight bounding box: every text and artist drawn) leaves the
    canvas: clipped in a PNG saved without a tight bbox. Empty when all is inside."""
    box = fig.get_tightbbox(fig.canvas.get_renderer())  # inches
    width, height = fig.get_size_inches()
    inside = box.x0 >= -0.02 and box.y0 >= -0.02 and box.x1 <= width + 0.02 and box.y1 <= height + 0.02
    return [] if inside else [f"drawn {box.bounds} beyond the {width:g}×{height:g} in canvas"]


def _legend_labels(fig) -> list[str]:
    legends = [a.get_legend() for a in fig.axes if a.get_legend()] + list(fig.legends)
    return [t.get_text() for lg in legends for t in lg.get_texts()]


def _panels(fig):
    """The axes a reader sees as panels (not colour bars or twins without their own frame)."""
    return [a for a in fig.axes if a.get_visible() and a.axison]


# --- the Maze study (figures/maze-study) ----------------------------------------------------------

def test_passk_curves_count_seeds_per_series_in_words(drawn, maze):
    from catsim.plots import maze_study

    fig = drawn(maze_study, maze_study.plot_passk, maze, "x.png")
    labels = _legend_labels(fig)
    runs = {(r["method"], r["group_size"], r["gamma"]) for r in maze["runs"]}
    assert len(labels) >= len(runs)  # every series, at every N, says its own seed count
    assert not [x for x in labels if "1 seeds" in x]
    assert any("(1 seed)" in x for x in labels) and any("(3 seeds)" in x for x in labels)


def test_solution_mass_is_a_grid_readable_at_page_width(drawn, maze):
    from catsim.plots import maze_study

    fig = drawn(maze_study, maze_study.plot_solution_mass, maze, "x.png")
    width, height = fig.get_size_inches()
    assert len(_panels(fig)) == len({(r["method"], r["group_size"], r["gamma"]) for r in maze["runs"]})
    assert width <= 11 and width / height < 2.5  # not a strip: at most ~3 panels a row
    assert not _outside(fig)


def test_pvalues_write_the_test_resolution_and_no_label_overlaps_another(drawn, maze):
    from catsim.plots import maze_study

    fig = drawn(maze_study, maze_study.plot_pvalues, maze, "x.png")
    words = [t.get_text() for t in _texts(fig)]
    assert not [w for w in words if "p=0" in w.replace(" ", "") and "p=0." not in w.replace(" ", "")]
    assert any("1e-04" in w or "10^{-4}" in w or "10⁻⁴" in w for w in words)  # 10,000 iterations
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:  # the texts drawn on the data (annotations), pairwise
        boxes = [t.get_window_extent(renderer) for t in ax.texts if t.get_visible() and t.get_text().strip()]
        assert not [(i, j) for i in range(len(boxes)) for j in range(i) if boxes[i].overlaps(boxes[j])]
    assert not _outside(fig)


def test_passk_vs_step_labels_its_y_axes_and_says_what_step_0_is(drawn, maze):
    from catsim.plots import maze_study

    fig = drawn(maze_study, maze_study.plot_passk_vs_step, maze, "x.png", ks=(1, 8, 64))
    for ax in _panels(fig):
        if ax.get_subplotspec().is_first_col():
            assert ax.get_ylabel().strip()
    words = " ".join(t.get_text() for t in _texts(fig))
    assert "step 0" in words and "warm-up" in words
    assert f"{maze['preset']['curve_prompts']}" in words  # the subset the curve is evaluated on
    assert not _outside(fig)


def test_arms_frontier_gives_every_arm_its_own_colour_and_marker(drawn, maze):
    from catsim.plots import maze_arms

    arms = json.loads((FIGURES / "maze-study" / "arms.json").read_text())
    fig = drawn(maze_arms, maze_arms.plot_frontier, arms, maze, "x.png", 64)
    ax = fig.axes[0]
    handles, labels = ax.get_legend_handles_labels()
    styles = []
    for h in handles:
        line = h.lines[0] if hasattr(h, "lines") else h
        styles.append((matplotlib.colors.to_hex(line.get_color()), line.get_marker()))
    assert len(labels) >= 15
    colours = [c for c, _ in styles]
    assert len(set(colours)) == len(colours)
    assert len(set(styles)) == len(styles)


def test_arms_horizon_counts_one_seed_in_words(drawn, maze):
    from catsim.plots import maze_arms

    arms = json.loads((FIGURES / "maze-study" / "arms.json").read_text())
    first = min(r["seed"] for r in arms["runs"])
    arms = {**arms, "runs": [r for r in arms["runs"] if r["seed"] == first]}  # one seed an arm
    fig = drawn(maze_arms, maze_arms.plot_horizon, arms, maze, "x.png")
    labels = _legend_labels(fig)
    assert labels and all(x.endswith("(1 seed)") for x in labels)


# --- the methods study (figures/methods) ----------------------------------------------------------

def _methods_study():
    from catsim.experiments.methods import MethodsStudy

    d = json.loads((FIGURES / "methods" / "methods.json").read_text())
    ks = tuple(None if k is None else tuple(k) for k in d["passk_k"])
    return MethodsStudy(tuple(d["methods"]), tuple(d["group_sizes"]), np.asarray(d["mret"]),
                        np.asarray(d["qpos"]), d["steps"], d["seeds"], 0.0, np.asarray(d["update_rate"]), ks)


def test_methods_vs_n_has_few_series_a_panel_and_its_legends_off_the_data(drawn):
    from catsim.plots import methods

    study = _methods_study()
    fig = drawn(methods, methods.plot_vs_n, study, "x.png")
    panels = _panels(fig)
    assert max(len([ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]) +
               len(ax.containers) for ax in panels) <= 8
    named = {t for t in _legend_labels(fig)}
    assert set(study.methods) <= named  # every method still drawn and named
    renderer = fig.canvas.get_renderer()
    legends = [a.get_legend() for a in fig.axes if a.get_legend()] + list(fig.legends)
    for legend in legends:
        box = legend.get_window_extent(renderer)
        assert not [ax for ax in panels if box.overlaps(ax.get_window_extent(renderer))]


def test_methods_figures_rerender_from_the_committed_json(tmp_path):
    from catsim.experiments.methods import rerender_methods_study

    made = rerender_methods_study(FIGURES / "methods" / "methods.json", tmp_path)
    assert sorted(p.name for p in made) == ["methods_frontier.png", "methods_vs_n.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in made)


# --- the LLM pipeline (figures/llm-rl) ------------------------------------------------------------

def test_llm_comparison_has_no_empty_panel(drawn):
    from catsim.plots import llm_compare

    results = json.loads((FIGURES / "llm-rl" / "results.json").read_text())
    fig = drawn(llm_compare, llm_compare.plot_comparison, results, "x.png")
    for ax in _panels(fig):
        assert ax.get_lines() or ax.patches or ax.collections, ax.get_title()
    assert "--heldout-every" in " ".join(t.get_text() for t in _texts(fig))  # what was not measured
    assert not _outside(fig)


# --- catsim sweep and catsim lemma ----------------------------------------------------------------

def _sim_results(sizes):
    from catsim.sim.results import SimResults

    steps = np.arange(0, 101, 10)
    shape = (1, 2, len(sizes), 2, len(steps))
    rng = np.random.default_rng(0)
    data = {m: rng.uniform(0.2, 0.9, shape).astype(np.float32) for m in ("qpos", "mret", "mu_hat")}
    return SimResults(("paper",), (0.0, 1.0), tuple(sizes), (0, 1), steps, data)


@pytest.mark.parametrize("sizes, shown", [
    ((2, 8, 64, 512), {2, 8, 64, 512}),  # the user's own grid: every N it asked for
    ((4, 16), {4, 16}),
    ((2, 4, 8, 16, 32, 64, 128, 256), None),  # many N: a subset spread over the grid, both ends
])
def test_sweep_trajectories_show_the_n_the_user_asked(drawn, sizes, shown):
    from catsim.plots import fig2

    fig = drawn(fig2, fig2.plot_fig2, _sim_results(sizes), "x.png")
    labels = {int(x[2:]) for x in _legend_labels(fig) if x.startswith("N=")}
    if shown is not None:
        assert labels == shown
    else:
        assert min(sizes) in labels and max(sizes) in labels and 3 <= len(labels) <= 5
    assert labels <= set(sizes)


def test_paper_grid_trajectories_stay_the_papers_n(drawn):
    from catsim.plots import fig2
    from catsim.sim.config import PAPER_GROUP_SIZES

    fig = drawn(fig2, fig2.plot_fig2, _sim_results(PAPER_GROUP_SIZES), "x.png")
    assert {int(x[2:]) for x in _legend_labels(fig) if x.startswith("N=")} == set(fig2.CURVE_GROUP_SIZES)


@pytest.mark.parametrize("mus", [(0.5,), (0.5, 0.8), (0.8, 0.5, 0.2)])
def test_a_custom_lemma_figure_keeps_its_title_inside(mus):
    from catsim.plots.tail_miss import figure_tail_miss_panels

    fig = figure_tail_miss_panels(mus=mus, ns=list(range(1, 65)), rhos=None, taus=(0.01, 0.02))
    fig.canvas.draw()
    assert not _outside(fig)


def test_cli_redraws_the_methods_figures_from_methods_json_alone(tmp_path, capsys):
    import shutil

    from catsim.cli.main import main

    shutil.copy(FIGURES / "methods" / "methods.json", tmp_path / "methods.json")
    assert main(["sweep", "--study", "methods", "--rerender", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "methods_vs_n.png"),
                                               str(tmp_path / "methods_frontier.png")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["methods.json", "methods_frontier.png", "methods_vs_n.png"]
    assert main(["sweep", "--rerender", "--out", str(tmp_path)]) == 2  # fig2 has no rerender
    assert "--study methods" in capsys.readouterr().err
    assert main(["sweep", "--study", "methods", "--rerender", "--out", str(tmp_path / "none")]) == 2
    assert "no methods.json" in capsys.readouterr().err
