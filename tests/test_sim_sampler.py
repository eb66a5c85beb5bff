"""The group sampler draws exactly Multinomial(N, p): chi-square goodness of fit on small V,
including N = 131072, for both samplers, with zero-probability and dominant actions."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from catsim.sim import sampler

ALPHA = 1e-4  # a correct sampler fails a test with probability 1e-4


def _probs():
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.full(37, 0.4))
    p[[5, 36]] = 0.0  # impossible actions, one of them in the last (partial) block
    p[11] += 0.5  # one dominant action
    return (p / p.sum()).astype(np.float32)


def _chi_square(total_counts, p, n_total):
    expected = p.astype(np.float64) * n_total
    support = expected > 0
    assert total_counts[~support].sum() == 0, "an impossible action was drawn"
    chi = ((total_counts[support] - expected[support]) ** 2 / expected[support]).sum()
    return stats.chi2.sf(chi, support.sum() - 1)


@pytest.mark.parametrize("method", ["blocked", "inverse_cdf"])
@pytest.mark.parametrize("n,reps", [(3, 1000), (1000, 10), (131072, 2)])
def test_counts_are_multinomial(method, n, reps):
    p = _probs()
    draw = jax.jit(jax.vmap(lambda k: sampler.sample_counts(k, jnp.asarray(p), n, method, block_size=8)))
    counts = np.asarray(draw(jax.random.split(jax.random.key(n), reps)), np.float64)
    assert np.all(counts.sum(1) == n) and np.all(counts == np.round(counts))
    assert _chi_square(counts.sum(0), p, n * reps) > ALPHA


def test_large_n_per_draw_statistic():
    """Each single draw of N = 131072 is itself a good multinomial sample (Pearson statistic
    ~ χ²(V−1)): the sums of 8 independent statistics fit χ²(8(V−1))."""
    p = _probs()
    draw = jax.jit(jax.vmap(lambda k: sampler.sample_counts(k, jnp.asarray(p), 131072, "auto", 8)))
    counts = np.asarray(draw(jax.random.split(jax.random.key(9), 8)), np.float64)
    e = p.astype(np.float64) * 131072
    s = e > 0
    chi = (((counts[:, s] - e[s]) ** 2) / e[s]).sum()
    assert stats.chi2.sf(chi, 8 * (s.sum() - 1)) > ALPHA
    assert stats.chi2.cdf(chi, 8 * (s.sum() - 1)) > ALPHA  # not suspiciously good either


def test_samplers_agree_draw_for_draw():
    """Both samplers invert the same CDF with the same uniforms: identical draws."""
    p = jnp.asarray(_probs())
    key = jax.random.key(1)
    a = jax.jit(sampler.sample_actions_blocked, static_argnums=(2, 3))(key, p, 500, 8)
    b = jax.jit(sampler.sample_actions_inverse_cdf, static_argnums=(2, 3))(key, p, 500, 8)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_auto_choice_and_bad_name():
    assert sampler.choose_sampler("auto", 8) == "blocked"
    assert sampler.choose_sampler("auto", 131072) == "inverse_cdf"
    with pytest.raises(ValueError, match="unknown sampler"):
        sampler.choose_sampler("gumbel", 8)


def test_prefix_sum_matches_numpy():
    x = np.random.default_rng(0).random(1000).astype(np.float32)
    np.testing.assert_allclose(np.asarray(sampler._prefix_sum(jnp.asarray(x))), np.cumsum(x), rtol=1e-5)


@pytest.mark.parametrize("one_by_one", [True, False])
def test_search_right_equals_searchsorted_under_vmap(one_by_one, monkeypatch):
    """The batched search (runs one by one with `lax.map`, the CPU default, or one batched search,
    the accelerator default) returns exactly jnp.searchsorted's indices, for batched and shared
    CDFs and nested vmaps, including queries equal to CDF entries."""
    monkeypatch.setattr(sampler, "SEARCH_RUNS_ONE_BY_ONE", one_by_one)
    rng = np.random.default_rng(4)
    cdf_RxV = np.cumsum(rng.dirichlet(np.full(50, 0.3), size=3), axis=1).astype(np.float32)
    cdf_RxV[:, 10:13] = cdf_RxV[:, 9:10]  # runs of equal entries (zero-probability actions)
    u_RxN = rng.random((3, 200)).astype(np.float32)
    u_RxN[:, :5] = cdf_RxV[:, [0, 9, 11, 30, 49]]  # ties go right
    want = np.stack([np.searchsorted(c, u, side="right") for c, u in zip(cdf_RxV, u_RxN)])
    cdf, u = jnp.asarray(cdf_RxV), jnp.asarray(u_RxN)
    np.testing.assert_array_equal(np.asarray(jax.jit(jax.vmap(sampler.search_right))(cdf, u)), want)
    shared = np.stack([np.searchsorted(cdf_RxV[0], x, side="right") for x in u_RxN])
    got = jax.vmap(sampler.search_right, in_axes=(None, 0))(cdf[0], u)
    np.testing.assert_array_equal(np.asarray(got), shared)
    nested = jax.vmap(jax.vmap(sampler.search_right), in_axes=(None, 0))(cdf, jnp.stack([u, u]))
    np.testing.assert_array_equal(np.asarray(nested), np.stack([want, want]))
    np.testing.assert_array_equal(np.asarray(sampler.search_right(cdf[1], u[1])), want[1])


@pytest.mark.parametrize("method", ["blocked", "inverse_cdf"])
def test_num_draws_counts_the_first_draws(method):
    """`num_draws=n` of a longer draw = the counts of a group of n (same key): one program can
    serve every group size up to its static N (engine.program_group_size)."""
    p = jnp.asarray(_probs())
    draw = jax.jit(sampler.sample_counts, static_argnums=(2, 3, 4))
    for n in (1, 7, 64):
        key = jax.random.key(n)
        short = draw(key, p, n, method, 8)
        long = draw(key, p, 64, method, 8, jnp.int32(n))
        np.testing.assert_array_equal(np.asarray(long), np.asarray(short))
        assert float(long.sum()) == n


@pytest.mark.parametrize("n", [2048, 4096])
def test_default_blocks_and_auto_choice_are_multinomial(n):
    """The defaults (K = sampler.BLOCK_SIZE, "auto": blocked up to AUTO_BLOCKED_MAX_N, inverse CDF
    above) on a V of several blocks with a partial last block, zero and dominant actions."""
    rng = np.random.default_rng(n)
    p = rng.dirichlet(np.full(300, 0.5))
    p[[0, 77, 299]] = 0.0
    p[150] += 0.3
    p = (p / p.sum()).astype(np.float32)
    assert 300 % sampler.BLOCK_SIZE and 300 > 4 * sampler.BLOCK_SIZE
    method = sampler.choose_sampler("auto", n)
    assert method == ("blocked" if n <= sampler.AUTO_BLOCKED_MAX_N else "inverse_cdf")
    draw = jax.jit(jax.vmap(lambda k: sampler.sample_counts(k, jnp.asarray(p), n)))
    counts = np.asarray(draw(jax.random.split(jax.random.key(n), 20)), np.float64)
    assert np.all(counts.sum(1) == n)
    assert _chi_square(counts.sum(0), p, n * 20) > ALPHA
    same = jax.jit(lambda k: sampler.sample_counts(k, jnp.asarray(p), n, "inverse_cdf"))
    np.testing.assert_array_equal(np.asarray(same(jax.random.key(1))),  # blocked = inverse CDF
                                  np.asarray(jax.jit(lambda k: sampler.sample_counts(
                                      k, jnp.asarray(p), n, "blocked"))(jax.random.key(1))))


def _monotone_cdfs_with_ties(rng, runs, v):
    """Random non-decreasing CDFs (float32) with runs of zero-probability actions, a dominant
    action and a crowded stretch of tiny ones (many entries within one float32 ulp of each other)."""
    p_RxV = rng.dirichlet(np.full(v, 0.3), size=runs)
    p_RxV[:, 10:17] = 0.0
    p_RxV[:, v // 2:v // 2 + v // 4] *= 1e-6
    p_RxV[:, 3] += 1.0
    p_RxV[:, -3:] = 0.0
    return np.cumsum(p_RxV, axis=1).astype(np.float32)


def _queries(rng, cdf_RxV, n):
    u_RxN = (rng.random((cdf_RxV.shape[0], n)) * cdf_RxV[:, -1:]).astype(np.float32)
    picks = rng.integers(0, cdf_RxV.shape[1], size=n // 4)
    u_RxN[:, :n // 4] = cdf_RxV[:, picks]  # exactly at CDF values (ties go right)
    u_RxN[:, n // 4] = 0.0
    u_RxN[:, n // 4 + 1] = cdf_RxV[:, -1]  # the total itself
    u_RxN[:, n // 4 + 2] = np.nextafter(cdf_RxV[:, -1], np.float32(np.inf))  # above it
    u_RxN[:, n // 4 + 3] = np.nextafter(cdf_RxV[:, 20], np.float32(-np.inf))  # just below one
    return u_RxN


def _assert_equals_searchsorted(search, v, n, seed):
    """`search` batched over 3 runs (and on one run) = np.searchsorted, side="right"."""
    rng = np.random.default_rng(seed)
    cdf_RxV = _monotone_cdfs_with_ties(rng, 3, v)
    u_RxN = _queries(rng, cdf_RxV, n)
    want = np.stack([np.searchsorted(c, u, side="right") for c, u in zip(cdf_RxV, u_RxN)])
    got = jax.jit(jax.vmap(search))(jnp.asarray(cdf_RxV), jnp.asarray(u_RxN))
    np.testing.assert_array_equal(np.asarray(got), want)
    one = jax.jit(search)(jnp.asarray(cdf_RxV[0]), jnp.asarray(u_RxN[0]))
    np.testing.assert_array_equal(np.asarray(one), want[0])


@pytest.mark.parametrize("fan", [2, 8, 16])
@pytest.mark.parametrize("v,n", [(1024, 4096), (1000, 300), (5000, 100), (40, 50), (33, 50),
                                 (32 * 64, 100), (32 * 63, 100)])
def test_tree_search_equals_searchsorted(v, n, fan):
    """The tree search (fan-ary tree over block ends, count inside the block) returns exactly
    searchsorted's indices on monotone CDFs: V a multiple of K or not (padded), a number of
    blocks that fills the tree's last level exactly or but for one (V/K = 64, 63), ties,
    zero-probability runs, long stretches of tiny actions, queries at, between and beyond CDF
    values; one run and batched."""
    search = functools.partial(sampler.tree_search, fan=fan)
    _assert_equals_searchsorted(search, v, n, seed=v * n + fan)


def test_running_max_of_blocks_removes_the_dips_of_the_two_level_cdf():
    """Logits with a wide spread make the float32 two-level CDF dip by an ulp at some block
    boundaries (never inside a block); the tree search is the inverse CDF of its running maximum:
    non-decreasing, and unchanged wherever the CDF was already non-decreasing."""
    z = np.random.default_rng(2).normal(0.0, 3.0, 20_000).astype(np.float32)
    p = jax.nn.softmax(jnp.asarray(z))
    p_BxK = sampler._blocks(p, sampler.BLOCK_SIZE)
    within = sampler._row_prefix_sums(p_BxK)
    raw = np.asarray(within + (sampler._prefix_sum(within[:, -1]) - within[:, -1])[:, None])
    raw = raw.reshape(-1)
    np.testing.assert_array_equal(np.asarray(jax.jit(sampler.two_level_cdf)(p)), raw)
    assert np.any(np.diff(raw) < 0), "no dip: the test no longer covers the repair"
    assert np.all(np.diff(raw.reshape(-1, sampler.BLOCK_SIZE), axis=1) >= 0)  # within blocks
    fixed = np.asarray(jax.jit(sampler.running_max_of_blocks)(jnp.asarray(raw)))
    np.testing.assert_array_equal(fixed, np.maximum.accumulate(raw))
    # The tree search of the raw CDF counts as a search of its repaired form does.
    u = np.random.default_rng(3).random(20_000).astype(np.float32) * raw[-1]
    u[:2000] = raw[np.flatnonzero(np.diff(raw) < 0)[:1].repeat(2000) + np.arange(2000) % 3]
    got = jax.jit(sampler.tree_search)(jnp.asarray(raw), jnp.asarray(u))
    np.testing.assert_array_equal(np.asarray(got), np.searchsorted(fixed, u, side="right"))


@pytest.mark.parametrize("v", [1, 5, 31, 32, 33, 1000, 128_000])
def test_last_positive_from_the_block_totals_equals_the_pass_over_v(v):
    """The inverse-CDF sampler's clamp finds the last action with p > 0 from the CDF's block
    totals and one block row: the same index as the pass over V and the same CDF, for dense p,
    sparse p, p whose tail is zero (a whole block of zeros, a partial one, all but the first
    entry), all zeros, and one tiny positive entry (1e-30) among zeros."""
    rng = np.random.default_rng(v)
    parts = jax.jit(sampler._two_level_cdf_parts)
    cases = [rng.random(v), np.where(rng.random(v) < 0.9, 0.0, rng.random(v)), np.zeros(v)]
    for tail in sorted({0, 1, min(v, 31), min(v, 32), min(v, 33), v - 1}):
        p = rng.random(v)
        p[v - tail:] = 0.0
        cases.append(p)
    lone = np.zeros(v)
    lone[v // 2] = 1e-30
    cases.append(lone)
    for p in cases:
        p = jnp.asarray(p, jnp.float32)
        cdf, ends, last = parts(p)
        assert int(last) == int(sampler._last_positive(p)), np.flatnonzero(np.asarray(p))[-1:]
        np.testing.assert_array_equal(np.asarray(cdf), np.asarray(jax.jit(sampler.two_level_cdf)(p)))
        # the block ends the tree search gets from the totals' buffer: the CDF's own, bit for bit
        k = sampler.BLOCK_SIZE
        np.testing.assert_array_equal(np.asarray(ends), np.asarray(cdf).reshape(-1, k)[:, -1])


@pytest.mark.parametrize("n", [4096, 131072])
def test_tree_search_and_bisection_draw_the_same_groups(n):
    """Paper-size V: `sample_counts` with the tree search draws exactly the groups the bisection
    draws, on a policy with many tiny actions."""
    z = np.full(128_000, -12.0, np.float32)
    z[:10_000], z[0] = 4.0, 9.0
    p = jax.nn.softmax(jnp.asarray(z))
    key = jax.random.key(5)
    cdf = sampler.two_level_cdf(p)
    u = jax.random.uniform(key, (n,)) * cdf[-1]
    assert np.all(np.diff(np.asarray(cdf)) >= 0)
    found = jax.jit(sampler.tree_search)(cdf, u)
    np.testing.assert_array_equal(np.asarray(found), np.asarray(sampler.search_right(cdf, u)))
    counts = jax.jit(sampler.sample_counts, static_argnums=(2, 3))(key, p, n, "inverse_cdf")
    want = np.bincount(np.minimum(np.asarray(found), 127_999), minlength=128_000)
    np.testing.assert_array_equal(np.asarray(counts), want)


def test_forced_searches_draw_the_same_counts(monkeypatch):
    """`sampler.SEARCH` forces one search; both draw the same group on a monotone CDF, and an
    unknown name is an error."""
    z = np.full(4096, -6.0, np.float32)
    z[:300] = 2.0
    p = jax.nn.softmax(jnp.asarray(z))
    counts = {}
    for search in ("bisect", "tree"):
        monkeypatch.setattr(sampler, "SEARCH", search)
        jax.clear_caches()  # SEARCH is read when the sampler is traced
        counts[search] = np.asarray(jax.jit(sampler.sample_counts, static_argnums=(2, 3))(
            jax.random.key(3), p, 5000, "inverse_cdf"))
    assert counts["bisect"].sum() == 5000
    np.testing.assert_array_equal(counts["bisect"], counts["tree"])
    monkeypatch.setattr(sampler, "SEARCH", "guide")
    jax.clear_caches()
    with pytest.raises(ValueError, match="SEARCH"):
        sampler.sample_counts(jax.random.key(3), p, 5000, "inverse_cdf")


@pytest.mark.parametrize("n", [4096, 65536])
def test_uniforms_in_a_buffer_draw_the_same_groups(n, monkeypatch):
    """Computing the group's uniforms and the CDF's block totals into buffers first
    (`sampler.UNIFORMS_IN_A_BUFFER`, the CPU default) changes no draw, batched over runs as the
    engine draws."""
    z = np.random.default_rng(4).normal(0.0, 2.0, (3, 128_000)).astype(np.float32)
    p = jax.nn.softmax(jnp.asarray(z), axis=-1)
    keys = jax.random.split(jax.random.key(11), 3)
    draws = {}
    for in_a_buffer in (True, False):
        monkeypatch.setattr(sampler, "UNIFORMS_IN_A_BUFFER", in_a_buffer)
        jax.clear_caches()  # read when traced
        draws[in_a_buffer] = np.asarray(jax.jit(jax.vmap(
            lambda k, p: sampler.sample_draws(k, p, n, "inverse_cdf")[0]))(keys, p))
    np.testing.assert_array_equal(draws[True], draws[False])
    assert draws[True].min() >= 0 and draws[True].max() < 128_000
