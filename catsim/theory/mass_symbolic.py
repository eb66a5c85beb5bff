"""SymPy derivations of record for mass redistribution (F-GRPO §2.3, Prop. 3.2, App. C-H, N;
BroRL = Hu et al. 2025 eq. 17, Lemma 2, Cor. 3). THEORY.md §2-§3 states the results; here they
are DERIVED and every `prove_*` function returns the residual (derived - stated), which is 0.

Set-up used by the derivations: eight actions in four blocks of two,
    A = {0, 1} sampled correct,  U+ = {2, 3} unsampled correct,
    B = {4, 5} sampled wrong,    U- = {6, 7} unsampled wrong,
with symbolic probabilities p0..p7 (p7 eliminated by Σp = 1), symbolic rewards Rc, Rw, step η
and group size N. Two actions per block make every block sum (A2, Upos,2, ...) a genuine sum, so
an identity that holds here is not an accident of a single action.

Chain of the derivation (each link proved):
  1. softmax Jacobian ∂p_i/∂z_j = p_i(δ_ij - p_j)                        `prove_softmax_jacobian`
  2. first-order subset mass ΔQ_S = Σ_S p_i Δz_i - Q_S Σ_j p_j Δz_j     `prove_subset_mass_identity`
  3. Δz = η ∂L/∂z from 1., ΔQ from 2., compared with the stated closed forms:
     Prop. 3.2 and eq. 17 (paper rule), the linear rule with repeats, log-prob REINFORCE, the
     GRPO special case, and the residual showing Prop. 3.2 does NOT hold for REINFORCE.
"""

from __future__ import annotations

import functools

import sympy as sp

__all__ = [
    "BLOCKS",
    "grpo_special_case",
    "prove_app_h_monotone",
    "prove_expected_unsampled_second_moment",
    "prove_focal_scaling",
    "prove_grpo_special_case",
    "prove_hu_eq17",
    "prove_linear_rule_general",
    "prove_logprob_rule_general",
    "prove_low_lr_multiplier",
    "prove_mean_abs_grpo",
    "prove_pass_at_k",
    "prove_prop32",
    "prove_softmax_jacobian",
    "prove_subset_mass_identity",
    "reinforce_vs_prop32_residual",
    "all_proofs",
]

V = 8
P = sp.symbols("p0:8", positive=True)
Z = sp.symbols("z0:8", real=True)
eta, N = sp.symbols("eta N", positive=True)
Rc, Rw = sp.symbols("R_c R_w", real=True)
BLOCKS = {"A": (0, 1), "Upos": (2, 3), "B": (4, 5), "Uneg": (6, 7)}
CORRECT = BLOCKS["A"] + BLOCKS["Upos"]
SAMPLED = BLOCKS["A"] + BLOCKS["B"]


def _normalised(expr: sp.Expr) -> sp.Expr:
    """Impose Σ p = 1 by eliminating p7."""
    return expr.subs(P[7], 1 - sum(P[:7]))


def _zero(expr: sp.Expr) -> sp.Expr:
    """Canonical form of a polynomial residual after Σp = 1: expanded, with η/N cleared.

    All p-level residuals here are polynomials in p, R, c (times η/N), so full expansion decides
    whether they vanish; no heuristic `simplify` is needed (and a non-zero residual stays cheap)."""
    return sp.expand(sp.cancel(sp.expand(_normalised(expr)) * N / eta)) * eta / N


def _block_sum(name: str, power: int = 1) -> sp.Expr:
    return sum(P[i] ** power for i in BLOCKS[name])


def jacobian(i: int, j: int) -> sp.Expr:
    """∂p_i/∂z_j = p_i(δ_ij - p_j) (proved by `prove_softmax_jacobian`)."""
    return P[i] * ((1 if i == j else 0) - P[j])


def prove_softmax_jacobian(size: int = 4) -> sp.Expr:
    """Σ over i, j of |∂softmax_i/∂z_j - p_i(δ_ij - p_j)| simplified; 0 if proved."""
    z = sp.symbols(f"z0:{size}", real=True)
    total = sum(sp.exp(x) for x in z)
    soft = [sp.exp(x) / total for x in z]
    residual = sp.Integer(0)
    for i in range(size):
        for j in range(size):
            stated = soft[i] * ((1 if i == j else 0) - soft[j])
            # A rational function of the exp(z_k): `cancel` decides whether it is zero.
            residual += sp.Abs(sp.cancel(sp.together(sp.diff(soft[i], z[j]) - stated)))
    return residual


def prove_subset_mass_identity(size: int = 4, subset: tuple[int, ...] = (0, 2)) -> sp.Expr:
    """d/dt Σ_S softmax(z + tΔz) at t = 0 minus (Σ_S p_i Δz_i - Q_S Σ_j p_j Δz_j); 0 if proved."""
    z = sp.symbols(f"z0:{size}", real=True)
    dz = sp.symbols(f"dz0:{size}", real=True)
    t = sp.Symbol("t", real=True)
    total = sum(sp.exp(z[i] + t * dz[i]) for i in range(size))
    q_s = sum(sp.exp(z[i] + t * dz[i]) for i in subset) / total
    derivative = sp.diff(q_s, t).subs(t, 0)
    p = [sp.exp(x) / sum(sp.exp(y) for y in z) for x in z]
    stated = sum(p[i] * dz[i] for i in subset) - sum(p[i] for i in subset) * sum(p[j] * dz[j] for j in range(size))
    return sp.simplify(derivative - stated)


def _subset_change(dz: list[sp.Expr], subset: tuple[int, ...]) -> sp.Expr:
    """First-order ΔQ_S from the subset-mass identity."""
    return sum(P[i] * dz[i] for i in subset) - sum(P[i] for i in subset) * sum(P[j] * dz[j] for j in range(V))


def _gradient_linear(weight_of_action: dict[int, sp.Expr]) -> list[sp.Expr]:
    """η ∂/∂z_j of (1/N) Σ_a c_a p_a via the Jacobian: Δz_j = (η/N) Σ_a c_a p_a (δ_aj - p_j)."""
    return [eta / N * sum(c * jacobian(a, j) for a, c in weight_of_action.items()) for j in range(V)]


def _gradient_logprob(weight_of_action: dict[int, sp.Expr]) -> list[sp.Expr]:
    """η ∂/∂z_j of (1/N) Σ_a c_a log p_a, with ∂ log p_a/∂z_j = δ_aj - p_j (from the Jacobian)."""
    return [eta / N * sum(c * jacobian(a, j) / P[a] for a, c in weight_of_action.items()) for j in range(V)]


def _paper_rule_dz() -> list[sp.Expr]:
    rewards = {a: (Rc if a in CORRECT else Rw) for a in SAMPLED}
    return _gradient_linear(rewards)


def _stats() -> dict[str, sp.Expr]:
    ppos, pneg = _block_sum("A"), _block_sum("B")
    qpos = ppos + _block_sum("Upos")
    return {
        "Qpos": qpos, "Qneg": 1 - qpos, "Ppos": ppos, "Pneg": pneg, "Qupos": _block_sum("Upos"),
        "A2": _block_sum("A", 2), "B2": _block_sum("B", 2), "Upos2": _block_sum("Upos", 2),
        "Uneg2": _block_sum("Uneg", 2), "U2": _block_sum("Upos", 2) + _block_sum("Uneg", 2),
        "SR": Rc * ppos + Rw * pneg,
    }  # fmt: skip


def prop32_stated() -> sp.Expr:
    """Prop. 3.2 as stated (THEORY.md §2)."""
    s = _stats()
    return eta / N * (-s["SR"] * s["Upos2"] - s["Qupos"] * ((Rc - s["SR"]) * s["A2"] + (Rw - s["SR"]) * s["B2"] - s["SR"] * s["U2"]))


def eq17_stated() -> sp.Expr:
    """Hu et al. eq. 17 as stated (THEORY.md §2)."""
    s = _stats()
    return eta / N * ((Rc - s["SR"]) * s["Qneg"] * s["A2"] + (s["SR"] - Rw) * s["Qpos"] * s["B2"]
                      + s["SR"] * (s["Qpos"] * s["Uneg2"] - s["Qneg"] * s["Upos2"]))


def prove_prop32() -> sp.Expr:
    """Derived ΔQu,pos of the eq.-5 rule minus Prop. 3.2; 0 if proved."""
    return _zero(_subset_change(_paper_rule_dz(), BLOCKS["Upos"]) - prop32_stated())


def prove_hu_eq17() -> sp.Expr:
    """Derived ΔQpos of the eq.-5 rule minus Hu et al. eq. 17; 0 if proved."""
    return _zero(_subset_change(_paper_rule_dz(), CORRECT) - eq17_stated())


# Per-action weight sums c_a = Σ_{j: o_j = a} w_j for the sampled actions (repeats allowed).
C = {a: sp.Symbol(f"c{a}", real=True) for a in SAMPLED}


def prove_linear_rule_general() -> tuple[sp.Expr, sp.Expr]:
    """Linear surrogate with repeated draws (App. J): derived minus stated general forms
        ΔQ_S = (η/N)[Σ_S c_i p_i² - S·Σ_S p_i² - Q_S(Σ_i c_i p_i² - S·Σ_i p_i²)], S = Σ_i c_i p_i,
    for S = P (ΔQpos) and S = U ∩ P (ΔQu,pos). Returns (0, 0) if proved."""
    dz = _gradient_linear(C)
    s = sum(c * P[a] for a, c in C.items())
    coupling = sum(c * P[a] ** 2 for a, c in C.items()) - s * sum(p**2 for p in P)

    def stated(subset):
        direct = sum(C.get(i, 0) * P[i] ** 2 for i in subset) - s * sum(P[i] ** 2 for i in subset)
        return eta / N * (direct - sum(P[i] for i in subset) * coupling)

    return (_zero(_subset_change(dz, CORRECT) - stated(CORRECT)),
            _zero(_subset_change(dz, BLOCKS["Upos"]) - stated(BLOCKS["Upos"])))


def logprob_stated() -> tuple[sp.Expr, sp.Expr]:
    """Log-prob REINFORCE general forms (THEORY.md §2), S' = Σ_j w_j, first moments Σ_j w_j p_{o_j}."""
    s_prime = sum(C.values())
    first = sum(c * P[a] for a, c in C.items())
    coupling = first - s_prime * sum(p**2 for p in P)
    s = _stats()
    dqupos = eta / N * (-s_prime * s["Upos2"] - s["Qupos"] * coupling)
    direct_pos = sum(C[a] * P[a] for a in BLOCKS["A"]) - s_prime * sum(P[i] ** 2 for i in CORRECT)
    dqpos = eta / N * (direct_pos - s["Qpos"] * coupling)
    return dqpos, dqupos


def prove_logprob_rule_general() -> tuple[sp.Expr, sp.Expr]:
    """Derived minus stated (ΔQpos, ΔQu,pos) for log-prob REINFORCE; (0, 0) if proved."""
    dz = _gradient_logprob(C)
    dqpos, dqupos = logprob_stated()
    return (_zero(_subset_change(dz, CORRECT) - dqpos), _zero(_subset_change(dz, BLOCKS["Upos"]) - dqupos))


STAT_SYMBOLS = dict(zip(
    ("SR", "S_prime", "A2", "B2", "Upos2", "Uneg2", "Qupos"),
    sp.symbols("S_R S' A_2 B_2 U_pos2 U_neg2 Q_upos", real=True),
))  # fmt: skip


def reinforce_vs_prop32_residual() -> tuple[sp.Expr, sp.Expr]:
    """ΔQu,pos of REINFORCE with the paper's weights (each sampled action once, w = R) minus
    Prop. 3.2's form. Returns (residual in block sums, residual at the p-level minus that form).

    The first is NOT zero: with S' = Σ_j w_j = 2Rc + 2Rw here and Σ_a p_a² = A2 + B2 + U2,
        residual = (η/N)[(SR - S')·Upos,2 - Qu,pos·(SR - Rc·A2 - Rw·B2 + (SR - S')(A2 + B2 + U2))],
    so Prop. 3.2 needs the eq.-5 (linear, distinct-set) rule. The second is 0: the compact form
    is exactly what the derivation gives."""
    t = STAT_SYMBOLS
    u2 = t["Upos2"] + t["Uneg2"]
    total_sq = t["A2"] + t["B2"] + u2
    reinforce = eta / N * (-t["S_prime"] * t["Upos2"] - t["Qupos"] * (t["SR"] - t["S_prime"] * total_sq))
    prop32 = eta / N * (-t["SR"] * t["Upos2"] - t["Qupos"] * ((Rc - t["SR"]) * t["A2"] + (Rw - t["SR"]) * t["B2"] - t["SR"] * u2))
    compact = sp.collect(sp.expand(reinforce - prop32), [t["Upos2"], t["Qupos"]])
    s = _stats()
    at_p = compact.subs({t["SR"]: s["SR"], t["S_prime"]: 2 * Rc + 2 * Rw, t["A2"]: s["A2"], t["B2"]: s["B2"],
                         t["Upos2"]: s["Upos2"], t["Uneg2"]: s["Uneg2"], t["Qupos"]: s["Qupos"]})
    dz = _gradient_logprob({a: (Rc if a in CORRECT else Rw) for a in SAMPLED})
    derived_residual = _subset_change(dz, BLOCKS["Upos"]) - prop32_stated()
    return compact, _zero(derived_residual - at_p)


# ---- GRPO special case -----------------------------------------------------------------------

def grpo_special_case() -> dict[str, sp.Expr]:
    """GRPO special case, derived from the (proved) log-prob general forms at the level of sums.

    Binary rewards 1/0, X of N draws correct, μ̂ = X/N, population std σ = sqrt(μ̂(1-μ̂)), ε = 0:
    correct draws get w = (1-μ̂)/σ, wrong draws w = -μ̂/σ. Then
        S' = Σ_j w_j = X(1-μ̂)/σ - (N-X)μ̂/σ = 0,
        F_C = Σ_{correct j} w_j p_{o_j} = X(1-μ̂)p̄_C/σ,   F_W = -(N-X)μ̂ p̄_W/σ,  F = F_C + F_W,
    and the general forms give ΔQu,pos = (η/N)[-S'Upos,2 - Qu,pos(F - S'Σp²)],
    ΔQpos = (η/N)[F_C - S'Σ_P p² - Qpos(F - S'Σp²)]. σ is a positive symbol with σ² = μ̂(1-μ̂)
    imposed after clearing it from denominators."""
    x, n, sigma = sp.symbols("X N_draws sigma", positive=True)
    pbar_c, pbar_w, qpos, qupos, upos2, sum_p2, sum_pos_p2 = sp.symbols(
        "pbar_C pbar_W Q_pos Q_upos U_pos2 Sum_p2 Sum_P_p2", positive=True)
    mu_hat = x / n
    s_prime = x * (1 - mu_hat) / sigma - (n - x) * mu_hat / sigma
    f_c = x * (1 - mu_hat) * pbar_c / sigma
    f = f_c - (n - x) * mu_hat * pbar_w / sigma
    return {
        "dqpos": eta / n * (f_c - s_prime * sum_pos_p2 - qpos * (f - s_prime * sum_p2)),
        "dqupos": eta / n * (-s_prime * upos2 - qupos * (f - s_prime * sum_p2)),
        "dqpos_stated": eta * sigma * ((1 - qpos) * pbar_c + qpos * pbar_w),
        "dqupos_stated": -eta * qupos * sigma * (pbar_c - pbar_w),
        "sum_of_weights": sp.simplify(s_prime),
        "sigma": sigma,
        "sigma_squared": mu_hat * (1 - mu_hat),
    }


def prove_grpo_special_case() -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    """(ΔQpos residual, ΔQu,pos residual, S' = Σ_j w_j); all 0 if proved.

    ΔQpos = ησ(Qneg·p̄_C + Qpos·p̄_W) is a sum of non-negative terms, hence ΔQpos >= 0."""
    g = grpo_special_case()
    sigma = g["sigma"]

    def residual(derived, stated):
        # σ·(derived - stated) has only σ² left; replace it by μ̂(1 - μ̂).
        expr = sp.expand(sigma * (derived - stated)).subs(sigma**2, g["sigma_squared"])
        return sp.simplify(expr)

    return (residual(g["dqpos"], g["dqpos_stated"]), residual(g["dqupos"], g["dqupos_stated"]),
            g["sum_of_weights"])


def prove_focal_scaling() -> sp.Expr:
    """Scaling every weight by the focal factor g scales both first-order changes by g."""
    g = sp.Symbol("g", positive=True)
    dz = _gradient_logprob(C)
    dz_g = _gradient_logprob({a: g * c for a, c in C.items()})
    residual = 0
    for subset in (CORRECT, BLOCKS["Upos"]):
        residual += sp.Abs(_zero(_subset_change(dz_g, subset) - g * _subset_change(dz, subset)))
    return sp.simplify(residual)


# ---- App. H, BroRL, App. N --------------------------------------------------------------------


def prove_app_h_monotone(size: int = 3) -> tuple[sp.Expr, sp.Expr]:
    """App. H. With X = k correct draws, they are i.i.d. from q = π/μ on C, so
    E[Ppos | X=k] = Σ_C π(o)(1 - (1 - q(o))^k), and
        E[Ppos | X=k+1] - E[Ppos | X=k] = Σ_C π(o) q(o)(1 - q(o))^k >= 0            (1st residual)
    Similarly E[Pneg | X=k] = Σ_W π(o)(1 - (1 - r(o))^(N-k)), r = π/(1-μ), whose increment is
        -Σ_W π(o) r(o)(1 - r(o))^(N-k-1) <= 0                                         (2nd residual)
    so E[SR | X=k] = Rc·E[Ppos] + Rw·E[Pneg] is non-decreasing in k when Rc >= 0 >= Rw."""
    k, n = sp.symbols("k N", positive=True, integer=True)
    pi = sp.symbols(f"pi0:{size}", positive=True)
    mu_ = sum(pi)
    q = [x / mu_ for x in pi]

    def e_pos(kk):
        return sum(pi[i] * (1 - (1 - q[i]) ** kk) for i in range(size))

    res_pos = sp.simplify(e_pos(k + 1) - e_pos(k) - sum(pi[i] * q[i] * (1 - q[i]) ** k for i in range(size)))
    wrong = sp.symbols(f"omega0:{size}", positive=True)
    r = [x / sum(wrong) for x in wrong]

    def e_neg(kk):
        return sum(wrong[i] * (1 - (1 - r[i]) ** (n - kk)) for i in range(size))

    res_neg = sp.simplify(e_neg(k + 1) - e_neg(k) + sum(wrong[i] * r[i] * (1 - r[i]) ** (n - k - 1) for i in range(size)))
    return res_pos, res_neg


def prove_expected_unsampled_second_moment(size: int = 3, n: int = 3) -> sp.Expr:
    """BroRL Lemma 2 / Cor. 3: E[U2] = Σ_i p_i²(1 - p_i)^N, proved as a polynomial identity by
    enumerating all size^n draw sequences (p_last = 1 - others); 0 if proved."""
    import itertools

    p = list(sp.symbols(f"q0:{size - 1}", positive=True))
    p.append(1 - sum(p))
    expectation = sp.Integer(0)
    for seq in itertools.product(range(size), repeat=n):
        prob = sp.Mul(*(p[i] for i in seq))
        expectation += prob * sum(p[i] ** 2 for i in range(size) if i not in seq)
    stated = sum(p[i] ** 2 * (1 - p[i]) ** n for i in range(size))
    return sp.expand(expectation - stated)


def prove_pass_at_k(max_k: int = 5) -> sp.Expr:
    """pass@k = 1 - (1 - Qpos)^k: enumerate correct/wrong sequences of length k; 0 if proved."""
    import itertools

    qpos = sp.Symbol("Q_pos", positive=True)
    residual = sp.Integer(0)
    for k in range(1, max_k + 1):
        total = sum(sp.Mul(*(qpos if c else 1 - qpos for c in seq))
                    for seq in itertools.product((0, 1), repeat=k) if any(seq))
        residual += sp.Abs(sp.expand(total - (1 - (1 - qpos) ** k)))
    return sp.simplify(residual)


def prove_low_lr_multiplier() -> tuple[sp.Expr, sp.Expr]:
    """App. N: m_γ = ∫(1-μ)^γ sqrt(μ(1-μ))dμ / ∫ sqrt(μ(1-μ))dμ = B(3/2, γ+3/2)/B(3/2, 3/2)
    = (4/√π)Γ(γ+3/2)/Γ(γ+3).

    The integrals are Beta functions by definition (integrand μ^{1/2}(1-μ)^{γ+1/2}); the
    Beta-to-Gamma form is proved here for symbolic γ, and the integrals themselves are checked by
    30-digit quadrature in catsim.checks.mass_redistribution (SymPy's symbolic integration of
    them takes minutes). Returns (residual, exact m_{1/2} = 32/(15π))."""
    gam = sp.Symbol("gamma", positive=True)
    stated = low_lr_multiplier_stated(gam)
    beta_form = sp.beta(sp.Rational(3, 2), gam + sp.Rational(3, 2)) / sp.beta(sp.Rational(3, 2), sp.Rational(3, 2))
    residual = sp.simplify(sp.gammasimp(beta_form.rewrite(sp.gamma) - stated))
    return residual, sp.simplify(stated.subs(gam, sp.Rational(1, 2)))


def low_lr_multiplier_stated(gam):
    """(4/√π)Γ(γ+3/2)/Γ(γ+3) (App. N)."""
    return 4 / sp.sqrt(sp.pi) * sp.gamma(gam + sp.Rational(3, 2)) / sp.gamma(gam + 3)


def prove_mean_abs_grpo() -> sp.Expr:
    """Mean |A_GRPO| over a binary group with success rate μ (population std, ε = 0) minus
    2 sqrt(μ(1-μ)); 0 if proved."""
    m = sp.Symbol("mu", positive=True)
    sigma = sp.sqrt(m * (1 - m))
    mean_abs = m * (1 - m) / sigma + (1 - m) * m / sigma
    return sp.simplify(mean_abs - 2 * sigma)


@functools.lru_cache(maxsize=1)
def all_proofs() -> dict[str, sp.Expr]:
    """Every residual by name (each should be exactly 0); used by `catsim verify` and the tests.

    Cached: the derivations take ~10 s and are pure."""
    lin_pos, lin_upos = prove_linear_rule_general()
    log_pos, log_upos = prove_logprob_rule_general()
    grpo_pos, grpo_upos, grpo_sum = prove_grpo_special_case()
    app_h_pos, app_h_neg = prove_app_h_monotone()
    m_resid, _ = prove_low_lr_multiplier()
    _, reinforce_compact = reinforce_vs_prop32_residual()
    return {
        "softmax Jacobian": prove_softmax_jacobian(),
        "first-order subset-mass identity": prove_subset_mass_identity(),
        "Prop. 3.2 (dQu,pos, eq. 5 rule)": prove_prop32(),
        "Hu et al. eq. 17 (dQpos, eq. 5 rule)": prove_hu_eq17(),
        "linear rule with repeats: dQpos": lin_pos,
        "linear rule with repeats: dQu,pos": lin_upos,
        "log-prob REINFORCE: dQpos": log_pos,
        "log-prob REINFORCE: dQu,pos": log_upos,
        "GRPO special case: dQpos": grpo_pos,
        "GRPO special case: dQu,pos": grpo_upos,
        "GRPO weights sum to 0": grpo_sum,
        "focal weight scales both changes by g": prove_focal_scaling(),
        "App. H: E[Ppos|X=k] increment": app_h_pos,
        "App. H: E[Pneg|X=k] increment": app_h_neg,
        "BroRL: E[U2] = sum p^2 (1-p)^N": prove_expected_unsampled_second_moment(),
        "pass@k = 1-(1-Qpos)^k": prove_pass_at_k(),
        "REINFORCE residual vs Prop. 3.2 = its compact form": reinforce_compact,
        "App. N: m_gamma Beta form": m_resid,
        "App. N: mean |A_GRPO| = 2 sqrt(mu(1-mu))": prove_mean_abs_grpo(),
    }
