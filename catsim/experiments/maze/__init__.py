"""The paper's Maze study (§5.2, App. K; `catsim llm maze-study`), one module per part:

  presets      the plan: App. K's set-up (`paper`), the CPU study (`cpu`), a seconds-long `tiny`
  pieces       reading finished pieces back (resume): what makes an eval.json or results.json usable
  study        catsim's runs: warm-ups, GRPO and F-GRPO at every N and γ, evaluation, results.json
  trl          the same runs inside TRL (GRPOTrainer, catsim's F-GRPO plug-in), evaluated by catsim
  arms         the arms: named method configurations against the study's runs (arms.json)
  stats        seed statistics and the paired m-out-of-n test, which study, arms, trl and report share
  summaries    writing and checking the summary files;  check: `--report`'s check of them
  provenance   which set-up (machine, versions) each run ran on
  report       report.md and the figures;  arms_report: its arms' part
  parallel     the runs several at once (`--jobs`) and across hosts (`--part`);  worker: one such job
"""
