"""catsim.theory: closed forms of the paper's lemmas and propositions, and their SymPy derivations.

Lemma 3.1 (tail-miss probability): `tail_miss_probability`, `active_probability`,
`active_fraction_prediction` (Pr(active) by success rate: trainer, plots, advise),
`tail_miss_probability_masses`, `tail_miss_probability_jax`, `tail_miss_peak`, `regime_boundaries`.
Derivations of record: `catsim.theory.symbolic`.
"""

from catsim.theory.tail_miss import (
    TailMissPeak,
    active_fraction_prediction,
    active_probability,
    regime,
    regime_boundaries,
    tail_miss_continuous,
    tail_miss_peak,
    tail_miss_probability,
    tail_miss_probability_jax,
    tail_miss_probability_masses,
)

__all__ = [
    "TailMissPeak",
    "active_fraction_prediction",
    "active_probability",
    "regime",
    "regime_boundaries",
    "tail_miss_continuous",
    "tail_miss_peak",
    "tail_miss_probability",
    "tail_miss_probability_jax",
    "tail_miss_probability_masses",
]
