"""catsim.llm: the JAX transformer trainer.

model/ (config, transformer, checkpoints, tokenizer, sharding), rollout (the one sampling path),
scoring (the one teacher-forced path), rundir (the run directory of sft and rl), rl/ (GRPO-family
RL), sft (supervised warm-up), evaluate (pass@k and rare-solution diagnostics), safeguards (pure
detectors), metrics, tasks/ (verifiers and data; no model code). docs/llm.md describes the layout.
"""
