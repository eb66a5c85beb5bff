"""catsim.objectives.asymmetric and grad_clip: the asymmetric-GRPO components (issue 9) against
hand-computed values, the article's own PyTorch code, and optax."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from catsim.errors import CatsimError
from catsim.objectives import asymmetric as asym
from catsim.objectives import losses
from catsim.objectives.grad_clip import dual_threshold_clip


def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


# --- confidence weight ---


def test_confidence_weight_hand_values():
    # uniform policy: KL = 0 → w = 0.3 + 0.7·0.5 = 0.65 (the largest attainable weight)
    assert float(asym.confidence_weight(jnp.zeros(4))) == pytest.approx(0.65)
    # p = (1/2, 1/4, 1/4): KL(u‖p) = log(1/3) − (log ½ + 2 log ¼)/3 = −log 3 + (5/3) log 2
    logits = jnp.log(jnp.array([0.5, 0.25, 0.25]))
    kl_up = -math.log(3) + 5 / 3 * math.log(2)
    assert float(asym.kl_uniform_to_policy(logits)) == pytest.approx(kl_up, rel=1e-5)
    assert float(asym.confidence_weight(logits)) == pytest.approx(
        0.3 + 0.7 * _sigmoid(-kl_up), rel=1e-6
    )
    # KL(p‖u) = log 3 − H(p), H = ½ log 2 + ½ log 4 = 1.5 log 2
    kl_pu = math.log(3) - 1.5 * math.log(2)
    assert float(asym.kl_policy_to_uniform(logits)) == pytest.approx(kl_pu, rel=1e-5)
    w = asym.confidence_weight(logits, kl_direction="policy_to_uniform", baseline=0.5)
    assert float(w) == pytest.approx(0.5 + 0.5 * _sigmoid(-kl_pu), rel=1e-6)
    # a confident policy tends to the baseline
    assert float(asym.confidence_weight(jnp.array([30.0, 0.0, 0.0]))) == pytest.approx(
        0.3, abs=1e-4
    )
    # one weight per token for [T, V] logits
    assert asym.confidence_weight(jnp.zeros((7, 5))).shape == (7,)
    with pytest.raises(CatsimError, match="kl_direction"):
        asym.confidence_weight(logits, kl_direction="forward")


def test_confidence_weight_matches_article_pytorch_code():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional

    def confidence_weight(logits, baseline=0.3):  # verbatim from the article, §2.1
        probs = torch.softmax(logits, dim=-1)
        uniform = torch.ones_like(probs) / probs.size(-1)
        kl_div = F.kl_div(probs.log(), uniform, reduction="none").sum(-1)
        return baseline + (1 - baseline) * torch.sigmoid(-kl_div)

    logits = np.random.default_rng(0).normal(scale=2.0, size=(4, 6, 11))
    expected = confidence_weight(torch.tensor(logits, dtype=torch.float64)).numpy()
    np.testing.assert_allclose(asym.confidence_weight(jnp.asarray(logits)), expected, rtol=1e-5)


# --- channels ---


def test_positive_weight():
    np.testing.assert_allclose(
        asym.positive_weight(jnp.array([0.0, 0.25, 0.5, 1.0]), 0.5), [0, 0.5, 1, 1]
    )
    with pytest.raises(CatsimError, match="tau"):
        asym.positive_weight(jnp.ones(2), 0.0)


def test_negative_weight_both_readings():
    p = jnp.array([0.0, 0.5, 0.8, 1.0])
    # formula (π+ε)/(D−π+ε), ε = 0.01, D = 1: 0.01/1.01, 1, 0.81/0.21, 1.01/0.01
    np.testing.assert_allclose(
        asym.negative_weight_formula(p, 1.0, 0.01),
        [0.01 / 1.01, 1.0, 0.81 / 0.21, 101.0],
        rtol=1e-5,
    )
    # text (D−π+ε)/(D+ε): 1, 0.51/1.01, 0.21/1.01, 0.01/1.01
    np.testing.assert_allclose(
        asym.negative_weight_text(p, 1.0, 0.01),
        [1.0, 0.51 / 1.01, 0.21 / 1.01, 0.01 / 1.01],
        rtol=1e-5,
    )
    # the defining behaviour: formula grows with π, text shrinks
    grid = jnp.linspace(0, 1, 11)
    assert np.all(np.diff(asym.negative_weight_formula(grid)) > 0)
    assert np.all(np.diff(asym.negative_weight_text(grid)) < 0)
    np.testing.assert_array_equal(asym.negative_weight(p), asym.negative_weight_text(p))
    np.testing.assert_array_equal(
        asym.negative_weight(p, reading="formula"), asym.negative_weight_formula(p)
    )
    with pytest.raises(CatsimError, match="reading"):
        asym.negative_weight(p, reading="both")


def test_asymmetric_advantages_hand_computed():
    a = jnp.array([1.5, -0.5, -0.5, -0.5, 0.0])
    r = jnp.array([0.6, 0.0, 0.0, 0.0, 0.3])
    probs = jnp.array([0.1, 0.8, 0.2, 0.5, 0.4])
    conf = jnp.array([1.0, 0.5, 1.0, 1.0, 1.0])
    out = asym.asymmetric_advantages(a, r, probs, conf)
    # w⁺(0.6) = 0.6 (τ = 1); w⁻_text(π) = (1 − π + 0.01)/1.01
    expected = [
        1.5 * 0.6,
        -0.5 * (0.21 / 1.01) * 0.5,
        -0.5 * (0.81 / 1.01),
        -0.5 * (0.51 / 1.01),
        0.0,
    ]
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    cfg = asym.AsymmetricConfig(negative_reading="formula", positive_tau=0.5)
    out = asym.asymmetric_advantages(a, r, probs, config=cfg)
    assert float(out[0]) == pytest.approx(1.5)  # min(1, 0.6/0.5) = 1
    assert float(out[1]) == pytest.approx(-0.5 * 0.81 / 0.21, rel=1e-6)


def test_literal_channels_push_wrong_answers_down():
    r = jnp.array([1.0, 0.0, 0.5])
    probs = jnp.array([0.3, 0.8, 0.2])
    coeff = asym.asymmetric_reinforce_coefficients(r, probs)
    # 1·1 − 0; 0 − w⁻(0.8); 0.5·0.5 − w⁻(0.2)·0.5, with w⁻_text(π) = (1.01 − π)/1.01
    np.testing.assert_allclose(coeff, [1.0, -0.21 / 1.01, 0.25 - 0.5 * 0.81 / 1.01], rtol=1e-6)
    # an all-wrong group still gets a signal, and a gradient step lowers the sampled action's logit
    z = jnp.zeros(4)
    draws = jnp.array([2, 2, 3])
    c = asym.asymmetric_reinforce_coefficients(jnp.zeros(3), jnp.full(3, 0.25))
    grad = jax.grad(
        lambda z: losses.token_mean(losses.reinforce_loss(losses.action_log_probs(z, draws), c))
    )(z)
    z_new = z - 1.0 * grad
    p_old, p_new = jax.nn.softmax(z), jax.nn.softmax(z_new)
    assert float(p_new[2]) < float(p_old[2]) and float(p_new[3]) < float(p_old[3])


# --- distances ---


def _levenshtein_reference(a, b):
    @functools.cache
    def d(i, j):
        if i == 0 or j == 0:
            return i + j
        return min(d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (a[i - 1] != b[j - 1]))

    return d(len(a), len(b))


def test_edit_distance_hand_and_reference():
    assert int(asym.edit_distance(jnp.array([1, 2, 3, 4]), jnp.array([1, 3, 4, 5, 6]))) == 3
    # "kitten" → "sitting" = 3
    kitten = jnp.array([ord(c) for c in "kitten"])
    sitting = jnp.array([ord(c) for c in "sitting"])
    assert int(asym.edit_distance(kitten, sitting)) == 3
    rng = np.random.default_rng(3)
    seqs = rng.integers(0, 3, size=(6, 7))
    lens = rng.integers(0, 8, size=6)
    got = np.asarray(jax.jit(asym.pairwise_edit_distance)(jnp.asarray(seqs), jnp.asarray(lens)))
    for i in range(6):
        for j in range(6):
            ref = _levenshtein_reference(tuple(seqs[i, : lens[i]]), tuple(seqs[j, : lens[j]]))
            assert got[i, j] == ref, (i, j)


def test_python_ast_edit_distance():
    # formatting and comments do not count
    assert asym.python_ast_edit_distance("x = 1 + 2", "x=1+2  # sum") == 0
    # one operator node differs: Add → Sub
    assert asym.python_ast_edit_distance("x = 1 + 2", "x = 1 - 2") == 1
    # labels of "x = 1": Module, Assign, Name:x, Store, Constant:1 (5) vs ["<syntax-error>"] → 5
    assert asym.python_ast_edit_distance("x = 1", "def (") == 5
    assert asym.python_ast_edit_distance("def (", "if )") == 0


def test_kl_distances():
    p, q = np.array([0.5, 0.5]), np.array([0.9, 0.1])
    expected = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    m = asym.pairwise_kl(jnp.array([p, q]))
    np.testing.assert_allclose(
        m,
        [[0, expected], [0.5 * 0.0 + 0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5), 0]],
        rtol=1e-5,
        atol=1e-7,
    )
    np.testing.assert_allclose(
        asym.pairwise_abs_difference(jnp.array([0.0, 2.0, -1.0])), [[0, 2, 1], [2, 0, 3], [1, 3, 0]]
    )
    # zero entries of p contribute 0 (no NaN)
    assert float(asym.kl_divergence(jnp.array([1.0, 0.0]), jnp.array([0.5, 0.5]))) == pytest.approx(
        math.log(2)
    )
    # mean token distribution over the valid positions only
    logits = jnp.log(jnp.array([[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]]))
    np.testing.assert_allclose(
        asym.mean_token_distribution(logits, jnp.array([1, 1, 0])), [0.7, 0.3], rtol=1e-6
    )


# --- mixed groups and recomposition ---


def _dist(n, near_pairs, far=3.0):
    d = np.full((n, n), far)
    np.fill_diagonal(d, 0.0)
    for (i, j), x in near_pairs.items():
        d[i, j] = d[j, i] = x
    return jnp.asarray(d)


def test_mixed_group_weights_hand_case():
    pos = jnp.array([True, False, False, True, False])
    scores = jnp.array([0.2, 0.0, 0.0, 0.9, 0.0])
    # neg 1 is 1.0 from pos 0 (near), neg 4 is 1.9 from pos 3 (near), neg 2 is 3.0 from both (far)
    dist = _dist(5, {(1, 0): 1.0, (4, 3): 1.9})
    w = asym.mixed_group_weights(pos, dist, scores)
    np.testing.assert_allclose(w, [1.0, 1.0, 0.0, 1.5, 1.0])  # top-1 positive (index 3) × 1.5
    # δ is strict: a negative at exactly δ = 2.0 is far
    w = asym.mixed_group_weights(pos, _dist(5, {(1, 0): 2.0, (4, 3): 1.9}), scores)
    assert float(w[1]) == 0.0
    # top_k = 2 amplifies both positives
    cfg = asym.AsymmetricConfig(top_k=2, amplify=2.0)
    np.testing.assert_allclose(
        asym.mixed_group_weights(pos, dist, scores, config=cfg), [2, 1, 0, 2, 1]
    )
    # not mixed → untouched
    np.testing.assert_array_equal(asym.mixed_group_weights(jnp.ones(5, bool), dist), np.ones(5))
    np.testing.assert_array_equal(asym.mixed_group_weights(jnp.zeros(5, bool), dist), np.ones(5))
    with pytest.raises(CatsimError, match="shape"):
        asym.mixed_group_weights(pos, jnp.zeros((4, 4)))


def test_recompose_group_three_regimes():
    scores = jnp.array([0.1, 0.7, 0.0, 0.9, 0.3, 0.0])
    # rich: 4 positives (0,1,3,4) → only the best positive, index 3
    rich = jnp.array([True, True, False, True, True, False])
    np.testing.assert_array_equal(asym.recompose_group(rich, scores), [0, 0, 0, 1, 0, 0])
    # poor: positives {0, 3}, negatives {1, 2, 4, 5} with nearest-positive distances 0.5, 2.5, 1.0, 0.2
    poor = jnp.array([True, False, False, True, False, False])
    dist = _dist(6, {(1, 0): 0.5, (2, 3): 2.5, (4, 3): 1.0, (5, 0): 0.2}, far=9.0)
    np.testing.assert_array_equal(asym.recompose_group(poor, scores, dist), [1, 1, 0, 1, 1, 1])
    # poor without distances: top-3 negatives by score (1: 0.7, 4: 0.3, then 2 by index)
    np.testing.assert_array_equal(asym.recompose_group(poor, scores), [1, 1, 1, 1, 1, 0])
    # none: clusters {0,1,2} and {3,4} (δ = 2) → one representative each, in score order
    none = jnp.zeros(5, bool)
    dist = _dist(5, {(0, 1): 0.5, (0, 2): 1.0, (1, 2): 0.7, (3, 4): 0.3}, far=5.0)
    np.testing.assert_array_equal(asym.recompose_group(none, None, dist), [1, 0, 0, 1, 0])
    sc = jnp.array([0.0, 0.0, 1.0, 0.0, 0.5])
    np.testing.assert_array_equal(asym.recompose_group(none, sc, dist), [0, 0, 1, 0, 1])
    np.testing.assert_array_equal(asym.recompose_group(none), np.ones(5))


def test_recompose_and_mixed_vmap_jit_over_groups():
    pos = jnp.array([[True, True, True, False], [True, False, False, False], [False] * 4])
    dist = jnp.broadcast_to(_dist(4, {(1, 0): 0.5}), (3, 4, 4))
    keep = jax.jit(jax.vmap(asym.recompose_group))(pos, jnp.zeros((3, 4)), dist)
    # rich (3 positives, tied scores) → lowest-index positive; poor (1 positive) → it + the 3
    # negatives; none → leader clusters in index order: 0 (1 is 0.5 away, absorbed), 2, 3
    np.testing.assert_array_equal(keep, [[1, 0, 0, 0], [1, 1, 1, 1], [1, 0, 1, 1]])
    w = jax.jit(jax.vmap(asym.mixed_group_weights))(pos, dist)
    # row 0: positive 0 amplified, negative 3 is 3.0 from every positive (far);
    # row 1: negative 1 is 0.5 from positive 0 (near), 2 and 3 far; row 2 is not mixed
    np.testing.assert_array_equal(w, [[1.5, 1, 1, 0], [1.5, 1, 0, 0], [1, 1, 1, 1]])


# --- temperature ---


def test_cosine_temperature_hand_values():
    f = functools.partial(asym.cosine_temperature, total_steps=1000)  # T_max = 300
    assert float(f(0)) == pytest.approx(1.0)
    assert float(f(150)) == pytest.approx(0.6, rel=1e-6)  # cos(π/2) = 0
    assert float(f(75)) == pytest.approx(0.2 + 0.4 * (1 + math.cos(math.pi / 4)), rel=1e-6)
    assert float(f(300)) == pytest.approx(0.2, rel=1e-6)
    assert float(f(900)) == pytest.approx(0.2, rel=1e-6)
    assert float(asym.cosine_temperature(250, 1000, fraction=0.5)) == pytest.approx(0.6, rel=1e-6)
    np.testing.assert_allclose(jax.jit(jax.vmap(f))(jnp.array([0, 150])), [1.0, 0.6], rtol=1e-6)


def test_stepwise_temperature_hand_values():
    f = functools.partial(asym.stepwise_temperature, total_steps=1000, stages=4)  # T_max = 300
    got = [float(f(t)) for t in (0, 74, 75, 150, 299, 300, 800)]
    np.testing.assert_allclose(got, [1.0, 1.0, 0.8, 0.6, 0.4, 0.2, 0.2], rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(total_steps=0), "total_steps"),
        (dict(total_steps=10, tau_min=2.0), "tau_min must not exceed"),
        (dict(total_steps=10, fraction=0.0), "fraction"),
        (dict(total_steps=10, tau_min=0.0), "tau_min"),
    ],
)
def test_temperature_rejects_bad_args(kwargs, match):
    with pytest.raises(CatsimError, match=match):
        asym.cosine_temperature(0, **kwargs)


# --- dual-threshold clipping ---


def _tree(scale):
    rng = np.random.default_rng(int(scale * 1000))
    t = {
        "w": jnp.asarray(rng.normal(size=(3, 4)), jnp.float32),
        "b": jnp.asarray(rng.normal(size=5), jnp.float32),
    }
    norm = float(optax.tree.norm(t))
    return jax.tree.map(lambda x: x * (scale / norm), t)


@pytest.mark.parametrize("norm", [0.1, 0.3, 0.999, 1.0, 2.5, 40.0])
def test_dual_clip_equals_optax_above_lower_threshold(norm):
    g = _tree(norm)
    ours = dual_threshold_clip(1.0)
    ref = optax.clip_by_global_norm(1.0)
    out, _ = ours.update(g, ours.init(g))
    expected, _ = ref.update(g, ref.init(g))
    jax.tree.map(np.testing.assert_array_equal, out, expected)


@pytest.mark.parametrize("norm", [1e-4, 0.05, 0.0999])
def test_dual_clip_amplifies_small_gradients(norm):
    g = _tree(norm)
    t = dual_threshold_clip(1.0, lower_threshold=0.1, amplification=1.5)
    out, _ = jax.jit(t.update)(g, t.init(g))
    jax.tree.map(lambda o, x: np.testing.assert_allclose(o, 1.5 * x, rtol=1e-6), out, g)
    # with no lower threshold it is optax's clip everywhere
    t0 = dual_threshold_clip(1.0, lower_threshold=0.0)
    out0, _ = t0.update(g, t0.init(g))
    jax.tree.map(np.testing.assert_array_equal, out0, g)


def test_dual_clip_chains_and_validates():
    g = _tree(5.0)
    opt = optax.chain(dual_threshold_clip(1.0), optax.sgd(1.0))
    state = opt.init(g)
    upd, _ = opt.update(g, state)
    assert float(optax.tree.norm(upd)) == pytest.approx(1.0, rel=1e-6)
    with pytest.raises(CatsimError, match="lower_threshold"):
        dual_threshold_clip(0.1, lower_threshold=0.1)
    with pytest.raises(CatsimError, match="max_norm"):
        dual_threshold_clip(-1.0)


# --- safeguards and config ---


def test_collapse_warning():
    assert len(asym.collapse_warning([0.4, 0.3, 0.0])) == 1
    assert asym.collapse_warning([0.0, 0.0]) == ()  # not sudden
    assert asym.collapse_warning([0.3]) == ()
    assert asym.collapse_warning([0.3, 0.1]) == ()


def test_stagnation_warning():
    assert len(asym.stagnation_warning(100, 1000, 0.2, 0.2)) == 1
    assert asym.stagnation_warning(600, 1000, 0.2, 0.2) == ()  # late enough
    assert asym.stagnation_warning(100, 1000, 0.5, 0.2) == ()  # not at the floor
    assert len(asym.stagnation_warning(100, 1000, float(np.float32(0.2)), 0.2)) == 1  # float32 schedule value
    assert asym.stagnation_warning(100, 1000, 0.2001, 0.2) == ()
    flat = [0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]
    rising = [0.5, 0.6, 0.61, 0.62, 0.63, 0.64, 0.65]
    assert len(asym.stagnation_warning(100, 1000, 0.2, 0.2, pass_at_k=flat)) == 1
    assert asym.stagnation_warning(100, 1000, 0.2, 0.2, pass_at_k=rising) == ()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(baseline=1.5), "baseline"),
        (dict(kl_direction="x"), "kl_direction"),
        (dict(negative_reading="x"), "negative_reading"),
        (dict(positive_tau=0.0), "positive_tau"),
        (dict(top_k=-1), "top_k"),
        (dict(rich_positives=0), "rich_positives"),
    ],
)
def test_config_validation(kwargs, match):
    with pytest.raises(CatsimError, match=match):
        asym.AsymmetricConfig(**kwargs)
