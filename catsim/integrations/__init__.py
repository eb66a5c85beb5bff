"""catsim's group-advantage rules inside other RL trainers (optional extras; docs/integrations.md).

  catsim.integrations.verl   verl advantage estimators (`algorithm.adv_estimator=fgrpo`), loaded by
                             verl's `verl.plugins` entry point or `VERL_USE_EXTERNAL_MODULES`
  catsim.integrations.trl    `FGRPOConfig` / `FGRPOTrainer`: TRL's GRPOTrainer with catsim's rules
  catsim.integrations.tunix  Tunix advantage estimators (`advantage_estimator="fgrpo"`)

Every plug-in computes through one function, `catsim.integrations.host.group_advantages`, which
calls the rules of `catsim.objectives.registry` and F-GRPO's focal weight (arXiv 2602.06717, §4)
on JAX's CPU device; no rule is written again for a trainer. This package imports nothing heavy,
so `import catsim.integrations.<trainer>` fails only for a missing trainer.
"""
