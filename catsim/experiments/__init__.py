"""catsim.experiments — the one layer that both runs things and draws them.

Below it, runners never draw (`catsim.sim.sweep`, `catsim.llm`) and plots never run
(`catsim.plots` takes result objects: `SimResults`, a pipeline's results.json dict, theory samples).
The CLI calls one function of this package per command.

Modules:
  fig2          the paper's Fig. 2: sweep + figure + table (`catsim sweep`, `catsim reproduce`)
  theory        the Lemma 3.1 figures (Fig. 3, Fig. 5) and the one-step mass figure of Prop. 3.2
  llm_pipeline  warm-up → RL runs → evaluation → results.json (`catsim llm pipeline`)
  llm_report    report.md and the figures of a pipeline's results (re-renderable from results.json)
  llm_compare   GRPO vs F-GRPO vs asym-GRPO on Maze with difficulty levels (`catsim llm compare`)
  advise        Lemma 3.1 advice on a model's own samples (`catsim llm advise`)
  advise_study  that advice checked against GRPO training (`catsim llm advise-study`)
  reproduction  the published numbers against regenerated ones (`catsim reproduce`), with
                agreement (tolerances, table), published (readers) and provenance
"""
