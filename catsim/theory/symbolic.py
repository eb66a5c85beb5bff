"""SymPy derivations of record for the tail-miss theory (Lemma 3.1 of F-GRPO, arXiv 2602.06717).

Each function returns SymPy objects (or exact rationals) so tests and `catsim verify` can check
identities exactly, with no floating point involved:

- `inclusion_exclusion_tail_miss()`: Pr(B) derived from the three regions by inclusion-exclusion,
- `tail_miss_closed_form()` and `tail_miss_factored_form()`: the lemma's two stated forms,
- `enumerate_tail_miss(n, masses)`: exact multinomial enumeration over all 3^n outcome sequences,
- `tail_miss_polynomial_identity(n)`: the enumeration as a polynomial identity in the masses,
- `peak_equation()`: d Pr(B)/dN = 0 written as the paper's balance equation.

The mass-redistribution derivations (Prop. 3.2 and relatives) live in `catsim.theory.mass_symbolic`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from fractions import Fraction

import sympy as sp

__all__ = [
    "MASS_SYMBOLS",
    "enumerate_tail_miss",
    "inclusion_exclusion_tail_miss",
    "peak_equation",
    "prove_closed_form",
    "prove_factored_form",
    "prove_peak_equation",
    "tail_miss_closed_form",
    "tail_miss_factored_form",
    "tail_miss_polynomial_identity",
]

N = sp.Symbol("N", positive=True, integer=True)
tau, mu = sp.symbols("tau mu_pos", positive=True)
# Masses of the rare subset E, the other correct outcomes, and the wrong outcomes.
MASS_SYMBOLS = sp.symbols("m_E m_C m_W", positive=True)

_REGIONS = ("E", "C", "W")  # rare correct, other correct, wrong


def _all_in(regions: frozenset[str], masses: dict[str, sp.Expr], n: sp.Expr) -> sp.Expr:
    """Pr(every one of the n i.i.d. draws falls in `regions`) = (sum of their masses)^n."""
    if not regions:
        return sp.Integer(0)  # n >= 1 draws cannot all fall in the empty set
    return sp.Add(*(masses[r] for r in sorted(regions))) ** n


def inclusion_exclusion_tail_miss(n: sp.Expr = N) -> sp.Expr:
    """Pr(B) by inclusion-exclusion, in the region masses (m_E, m_C, m_W).

    B = "no draw in E" minus the two inactive groups inside it, "all draws in C" and
    "all draws in W". Writing A_S for "every draw lies in regions S" (so A_S ∩ A_T = A_{S∩T}):
        Pr(B) = Pr(A_{CW}) - Pr(A_C ∪ A_W) = Pr(A_{CW}) - [Pr(A_C) + Pr(A_W) - Pr(A_∅)].
    The code walks the union's subsets generically rather than writing the result down.
    """
    masses = dict(zip(_REGIONS, MASS_SYMBOLS))
    no_rare = frozenset({"C", "W"})
    excluded = [frozenset({"C"}), frozenset({"W"})]  # inactive groups inside "no draw in E"
    union = sp.Integer(0)
    for k in range(1, len(excluded) + 1):
        for subset in itertools.combinations(excluded, k):
            intersection = frozenset.intersection(*subset)
            union += (-1) ** (k + 1) * _all_in(intersection, masses, n)
    return _all_in(no_rare, masses, n) - union


def _substitute_tau_mu(expr: sp.Expr) -> sp.Expr:
    m_e, m_c, m_w = MASS_SYMBOLS
    return expr.subs({m_e: tau, m_c: mu - tau, m_w: 1 - mu})


def tail_miss_closed_form(n: sp.Expr = N) -> sp.Expr:
    """Lemma 3.1 as stated: (1-tau)^N - (mu-tau)^N - (1-mu)^N."""
    return (1 - tau) ** n - (mu - tau) ** n - (1 - mu) ** n


def tail_miss_factored_form(n: sp.Expr = N) -> sp.Expr:
    """(1-tau)^N * [1 - r^N - (1-r)^N] with r = (mu-tau)/(1-tau), the form the numerics use."""
    r = (mu - tau) / (1 - tau)
    return (1 - tau) ** n * (1 - r**n - (1 - r) ** n)


def prove_closed_form() -> sp.Expr:
    """Inclusion-exclusion (with m_E + m_C + m_W = 1) minus the closed form; returns 0 if proved."""
    return sp.simplify(_substitute_tau_mu(inclusion_exclusion_tail_miss()) - tail_miss_closed_form())


def prove_factored_form() -> sp.Expr:
    """Closed form minus factored form, for 0 < tau < mu <= 1 (all bases positive); 0 if proved.

    (1-tau)^N r^N = (mu-tau)^N needs positive bases; we substitute mu = tau + d, 1 = mu + w
    with d, w > 0 so SymPy may combine the powers.
    """
    d, w = sp.symbols("d w", positive=True)
    subs = {mu: tau + d}
    closed = tail_miss_closed_form().subs(subs).subs(tau, 1 - d - w)
    factored = tail_miss_factored_form().subs(subs).subs(tau, 1 - d - w)
    difference = sp.expand(sp.powsimp(sp.expand_power_base(sp.expand(factored - closed), force=True)))
    return sp.simplify(difference)


def enumerate_tail_miss(n: int, masses: Sequence[Fraction | int]) -> Fraction:
    """Exact Pr(B) by enumerating all 3^n sequences of regions (E, C, W) with rational masses."""
    if n < 1:
        raise ValueError("n must be >= 1")
    m = dict(zip(_REGIONS, (Fraction(x) for x in masses)))
    if sum(m.values()) != 1:
        raise ValueError("masses must sum to 1")
    total = Fraction(0)
    for seq in itertools.product(_REGIONS, repeat=n):
        if "E" not in seq and "C" in seq and "W" in seq:
            prob = Fraction(1)
            for region in seq:
                prob *= m[region]
            total += prob
    return total


def tail_miss_polynomial_identity(n: int) -> sp.Expr:
    """Multinomial sum over count vectors with k_E = 0, k_C >= 1, k_W >= 1, minus the
    inclusion-exclusion result, expanded as a polynomial in (m_E, m_C, m_W); 0 if they agree."""
    m_e, m_c, m_w = MASS_SYMBOLS
    total = sp.Integer(0)
    for k_c in range(1, n):
        k_w = n - k_c
        total += sp.binomial(n, k_c) * m_c**k_c * m_w**k_w
    return sp.expand(total - inclusion_exclusion_tail_miss(sp.Integer(n)))


def peak_equation() -> sp.Eq:
    """The continuous maximiser's equation as stated in THEORY.md §1:
    (1-tau)^N ln(1/(1-tau)) = (mu-tau)^N ln(1/(mu-tau)) + (1-mu)^N ln(1/(1-mu))."""
    return sp.Eq(
        (1 - tau) ** N * sp.log(1 / (1 - tau)),
        (mu - tau) ** N * sp.log(1 / (mu - tau)) + (1 - mu) ** N * sp.log(1 / (1 - mu)),
    )


def prove_peak_equation() -> sp.Expr:
    """d/dN of the closed form equals rhs - lhs of `peak_equation`; returns the difference (0)."""
    eq = peak_equation()
    derivative = sp.diff(tail_miss_closed_form(), N)
    return sp.simplify(sp.expand_log(derivative - (eq.rhs - eq.lhs), force=True))


def exact_grid(ns: Iterable[int], masses: Iterable[Sequence[Fraction]]) -> list[tuple[int, tuple, Fraction]]:
    """(n, masses, exact Pr(B)) by enumeration for every pair; used by checks and tests."""
    return [(n, tuple(m), enumerate_tail_miss(n, m)) for n in ns for m in masses]
