"""catsim: why group-relative RL forgets rare correct solutions, and how to test fixes.

Subpackages:
  catsim.theory      closed forms (Lemma 3.1, Prop. 3.2, ...) and their SymPy derivations
  catsim.objectives  advantages, focal weights and losses shared by the simulator and the trainer
  catsim.sim         JAX categorical-policy simulator (the paper's Figure 2)
  catsim.llm         JAX transformer trainer (tasks, warm-up, RL, evaluation)
  catsim.plots       figures from result objects (runs nothing)
  catsim.experiments the layer that runs and draws: Fig. 2, theory figures, LLM pipeline, reports
  catsim.cli         the `catsim` command line (parse, call one library function, print)

Layers import downward only: theory/objectives < sim, llm < plots < experiments < cli.
"""

from catsim.errors import CatsimError

__version__ = "0.1.0"
__all__ = ["CatsimError", "__version__"]
