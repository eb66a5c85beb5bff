"""SymPy derivations of Lemma 3.1 and their agreement with the float64 code."""

from fractions import Fraction

import sympy as sp

from catsim.theory import symbolic
from catsim.theory.tail_miss import tail_miss_probability


def test_inclusion_exclusion_gives_closed_form():
    m_e, m_c, m_w = symbolic.MASS_SYMBOLS
    derived = symbolic.inclusion_exclusion_tail_miss()
    assert sp.simplify(derived - ((m_c + m_w) ** symbolic.N - m_c**symbolic.N - m_w**symbolic.N)) == 0
    assert symbolic.prove_closed_form() == 0


def test_factored_form_and_peak_equation():
    assert symbolic.prove_factored_form() == 0
    assert symbolic.prove_peak_equation() == 0


def test_proofs_can_fail():
    # A wrong closed form (sign flip) must not simplify to zero.
    wrong = symbolic.tail_miss_closed_form() + 2 * (1 - symbolic.mu) ** symbolic.N
    assert sp.simplify(symbolic._substitute_tau_mu(symbolic.inclusion_exclusion_tail_miss()) - wrong) != 0


def test_multinomial_polynomial_identity_up_to_8():
    for n in range(1, 9):
        assert symbolic.tail_miss_polynomial_identity(n) == 0


def test_enumeration_matches_float64_to_last_digits():
    for masses in [(Fraction(1, 10), Fraction(3, 10), Fraction(3, 5)), (Fraction(1, 1000), Fraction(199, 1000), Fraction(4, 5))]:
        for n in range(1, 9):
            exact = symbolic.enumerate_tail_miss(n, masses)
            closed = (1 - masses[0]) ** n - masses[1] ** n - masses[2] ** n
            assert exact == closed  # exact rational identity
            value = tail_miss_probability(n, float(masses[0]), float(masses[0] + masses[1]))
            assert abs(value - float(exact)) <= 1e-14 * float(exact) + (0 if exact else 0)
