"""The out-of-bag bounds of a forest's majority vote (jaxtree.vote_bounds) against independent
NumPy/SciPy float64 computations, brute force, their limits, and the reference package mvb."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import brentq

from jaxtree import vote_bounds as vb


def random_problem(seed, m=12, n=200, classes=3, p_oob=0.37, flip=0.25):
    """A forest's OOB mask [m, n], predictions [m, n] and labels [n]: tree h errs on a point with
    probability flip·u_h (u_h uniform in [0.5, 1.5]), always with a wrong label."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    mask = rng.random((m, n)) < p_oob
    wrong = rng.random((m, n)) < flip * rng.uniform(0.5, 1.5, m)[:, None]
    pred = np.where(wrong, (y + rng.integers(1, classes, (m, n))) % classes, y)
    return mask, pred, y


# ---------------------------------------------------------------------------------------------
# Independent NumPy float64 versions
def np_kl(q, p):
    out = 0.0
    for a, b in ((q, p), (1 - q, 1 - p)):
        if a > 0:
            out += a * np.log(a / b) if b > 0 else np.inf
    return out


def np_kl_inverse(q, rhs):
    """max{p in [q, 1] : kl(q||p) <= rhs} by Brent's method."""
    if q >= 1 or np_kl(q, 1 - 1e-15) <= rhs:
        return 1.0
    return brentq(lambda p: np_kl(q, p) - rhs, q, 1 - 1e-15, xtol=1e-15, rtol=1e-15)


def np_bounds(mask, pred, y, rho, delta):
    """Both bounds by loops over trees and pairs (the paper's definitions)."""
    m = mask.shape[0]
    err = (pred != y) & mask
    L = np.array([err[h].sum() / mask[h].sum() for h in range(m)])
    T = np.array([[(err[h] & err[g]).sum() / (mask[h] & mask[g]).sum() for g in range(m)]
                  for h in range(m)])
    n = min(mask[h].sum() for h in range(m))
    n2 = min((mask[h] & mask[g]).sum() for h in range(m) for g in range(m))
    kl = sum(r * np.log(r * m) for r in rho if r > 0)
    gibbs, tandem = rho @ L, rho @ T @ rho
    fo = 2 * min(1, np_kl_inverse(gibbs, (kl + np.log(2 * np.sqrt(n) / delta)) / n))
    tnd = 4 * min(0.25, np_kl_inverse(tandem, (2 * kl + np.log(2 * np.sqrt(n2) / delta)) / n2))
    return fo, tnd, gibbs, tandem, kl, n, n2


# ---------------------------------------------------------------------------------------------
# kl and its inverse
def test_kl_bernoulli_matches_numpy(precision):
    qs = [0.0, 0.01, 0.3, 0.5, 0.99, 1.0]
    ps = [1e-3, 0.2, 0.5, 0.8, 0.999]
    ours = np.asarray(vb.kl_bernoulli(np.array(qs)[:, None], np.array(ps)[None, :]))
    expected = np.array([[np_kl(q, p) for p in ps] for q in qs])
    np.testing.assert_allclose(ours, expected, rtol=1e-12 if precision == np.float64 else 2e-5,
                               atol=1e-6 if precision == np.float32 else 0)
    assert float(vb.kl_bernoulli(0.3, 0.0)) == np.inf and float(vb.kl_bernoulli(0.0, 0.0)) == 0


def test_kl_inverse_against_brent_and_a_grid():
    qs = np.array([0.0, 1e-4, 0.05, 0.2, 0.5, 0.7, 0.999, 1.0])
    rhs = np.array([0.0, 1e-5, 1e-3, 0.02, 0.3, 2.0])
    with jax.enable_x64(True):
        ours = np.asarray(vb.kl_inverse_upper(qs[:, None], rhs[None, :]))
    grid = np.linspace(0, 1, 200_001)
    for i, q in enumerate(qs):
        for j, b in enumerate(rhs):
            exact = np_kl_inverse(q, b)
            assert ours[i, j] >= exact - 1e-12
            np.testing.assert_allclose(ours[i, j], exact, atol=1e-10)
            feasible = grid[(grid >= q) & (np.array([np_kl(q, p) for p in grid]) <= b)] \
                if (i + j) % 7 == 0 else None    # brute force on a few cells (slow in Python)
            if feasible is not None:
                assert feasible.max() <= ours[i, j] + 1e-12
                assert ours[i, j] - feasible.max() <= 1e-5 + 1e-10


def test_kl_inverse_float32_is_never_below_float64():
    qs = np.linspace(0, 1, 41)
    rhs = np.geomspace(1e-6, 1.0, 13)
    with jax.enable_x64(True):
        exact = np.asarray(vb.kl_inverse_upper(qs[:, None], rhs[None, :]))
    single = np.asarray(vb.kl_inverse_upper(qs[:, None].astype(np.float32),
                                            rhs[None, :].astype(np.float32)))
    assert single.dtype == np.float32
    np.testing.assert_allclose(single, exact, atol=2e-4)


def test_kl_inverse_gradient_matches_finite_differences():
    with jax.enable_x64(True):
        for q, b in [(0.1, 0.01), (0.3, 0.2), (0.02, 0.05)]:
            gq, gb = jax.grad(vb.kl_inverse_upper, argnums=(0, 1))(q, b)
            h = 1e-6
            fq = (np_kl_inverse(q + h, b) - np_kl_inverse(q - h, b)) / (2 * h)
            fb = (np_kl_inverse(q, b + h) - np_kl_inverse(q, b - h)) / (2 * h)
            np.testing.assert_allclose([gq, gb], [fq, fb], rtol=1e-5)
        assert float(jax.grad(vb.kl_inverse_upper, argnums=1)(0.5, np.inf)) == 0  # p = 1


# ---------------------------------------------------------------------------------------------
# Statistics and bounds
def test_oob_statistics_against_loops():
    mask, pred, y = random_problem(3, m=7, n=90)
    stats = vb.oob_statistics(mask, pred, y)
    for h in range(7):
        assert stats.sizes[h] == mask[h].sum()
        assert stats.errors[h] == ((pred[h] != y) & mask[h]).sum()
        for g in range(7):
            both = mask[h] & mask[g]
            assert stats.pair_sizes[h, g] == both.sum()
            assert stats.tandem_errors[h, g] == ((pred[h] != y) & (pred[g] != y) & both).sum()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bounds_against_numpy(seed):
    mask, pred, y = random_problem(seed, m=9, n=400 + 300 * seed, flip=0.1 + 0.1 * seed)
    rho = np.random.default_rng(seed).dirichlet(np.ones(9))
    rho[0] = 0.0
    rho /= rho.sum()
    cert = vb.forest_certificate(mask, pred, y, delta=0.05, weights=rho)
    ours = [float(getattr(cert, f)) for f in ("first_order", "tandem", "gibbs_risk",
                                               "tandem_risk", "kl", "n_min", "n2_min")]
    np.testing.assert_allclose(ours, np_bounds(mask, pred, y, rho, 0.05), rtol=1e-9, atol=1e-12)


def test_zero_error_leaves_the_log_term_only():
    mask, _, y = random_problem(4, m=10, n=500)
    cert = vb.forest_certificate(mask, np.tile(y, (10, 1)), y, delta=0.1)
    # kl(0‖p) = −log(1 − p): the inverse at ε is 1 − e^{−ε}, ε = log(2√n/δ)/n.
    eps = lambda n: np.log(2 * np.sqrt(n) / 0.1) / n
    assert float(cert.gibbs_risk) == 0 and float(cert.tandem_risk) == 0
    np.testing.assert_allclose(float(cert.first_order), 2 * -np.expm1(-eps(int(cert.n_min))),
                               rtol=1e-10)
    np.testing.assert_allclose(float(cert.tandem), 4 * -np.expm1(-eps(int(cert.n2_min))),
                               rtol=1e-10)


def test_monotone_in_delta_sample_size_and_errors():
    mask, pred, y = random_problem(5, m=8, n=1500, flip=0.1)
    cert = lambda *a, **k: vb.forest_certificate(*a, **k)
    base = cert(mask, pred, y, delta=0.05)
    looser = cert(mask, pred, y, delta=0.01)
    assert looser.first_order > base.first_order and looser.tandem > base.tandem
    # the same forest on the data repeated 4 times: same risks, 4x the OOB points
    big = cert(np.tile(mask, 4), np.tile(pred, 4), np.tile(y, 4))
    np.testing.assert_allclose(float(big.gibbs_risk), float(base.gibbs_risk), rtol=1e-12)
    assert big.n_min == 4 * base.n_min and big.first_order < base.first_order
    assert big.tandem < base.tandem
    # one more error of one tree raises both
    i = np.flatnonzero(mask[0] & (pred[0] == y))[0]
    worse = pred.copy()
    worse[:, i] = (y[i] + 1) % 3
    w = cert(mask, worse, y)
    assert w.first_order > base.first_order and w.tandem > base.tandem
    # a tandem error needs both trees wrong; twice the Gibbs risk is below the first-order bound
    assert base.tandem_risk <= base.gibbs_risk and base.first_order >= 2 * base.gibbs_risk


def test_duplicating_every_tree_changes_nothing():
    mask, pred, y = random_problem(6, m=6, n=700)
    one = vb.forest_certificate(mask, pred, y)
    two = vb.forest_certificate(np.concatenate([mask, mask]), np.concatenate([pred, pred]), y)
    for f in ("first_order", "tandem", "gibbs_risk", "tandem_risk", "n_min", "n2_min"):
        np.testing.assert_allclose(float(getattr(two, f)), float(getattr(one, f)), rtol=1e-12)


def test_vacuous_when_no_point_is_out_of_bag_for_a_pair():
    mask, pred, y = random_problem(7, m=4, n=300)
    mask[0, :150], mask[0, 150:] = True, False
    mask[1, :150], mask[1, 150:] = False, True
    cert = vb.forest_certificate(mask, pred, y)
    assert int(cert.n2_min) == 0 and float(cert.tandem) == 1.0
    assert float(cert.first_order) < 2


def test_certificate_vmaps_over_weights():
    mask, pred, y = random_problem(8, m=5, n=250)
    rhos = np.random.default_rng(0).dirichlet(np.ones(5), size=4)
    with jax.enable_x64(True):
        stats = vb.oob_statistics(mask, pred, y)
        batch = jax.jit(jax.vmap(lambda r: vb.certificate_at(stats, r)))(rhos)
    for k in range(4):
        one = vb.forest_certificate(mask, pred, y, weights=rhos[k])
        np.testing.assert_allclose(batch.tandem[k], one.tandem, rtol=1e-12)
        np.testing.assert_allclose(batch.first_order[k], one.first_order, rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# rho
@pytest.mark.parametrize("bound", ["first_order", "tandem"])
def test_optimized_rho_never_worse_than_uniform(bound):
    mask, pred, y = random_problem(9, m=15, n=3000, flip=0.3)
    uniform = vb.forest_certificate(mask, pred, y)
    tuned = vb.forest_certificate(mask, pred, y, weights=bound)
    assert float(getattr(tuned, bound)) <= float(getattr(uniform, bound))
    np.testing.assert_allclose(np.sum(tuned.rho), 1.0, rtol=1e-12)
    best = vb.forest_certificate(mask, pred, y, weights="bound")
    assert min(best.first_order, best.tandem) <= min(tuned.first_order, tuned.tandem)


def test_zero_steps_keep_uniform():
    mask, pred, y = random_problem(10, m=5, n=200)
    rho = vb.optimize_rho(vb.oob_statistics(mask, pred, y), "tandem", steps=0)
    np.testing.assert_allclose(rho, np.full(5, 0.2), rtol=1e-6)


# Reference values from mvb (github.com/StephanLorenzen/MajorityVoteBounds, commit 23f8669), the
# authors' implementation: for each case, its PBkl and TND at uniform rho, then PBkl at the rho of
# its optimizeLamb and TND at the rho of its optimizeTND (its defaults). Produced by running, in a
# scratch copy of its mvb package, util.oob_risks / util.oob_tandem_risks on
# random_problem(*case) and the bound functions on the resulting rates and minimum sizes.
MVB_CASES = [(11, 20, 800, 3, 0.37, 0.2), (12, 30, 2000, 2, 0.37, 0.35)]
MVB_VALUES = {
    MVB_CASES[0]: (0.6035674591835265, 0.6579432965589841, 0.4560536111566175, 0.6148574846722171),
    MVB_CASES[1]: (0.7721004583420863, 0.7844656746983768, 0.4583575900342149, 0.5375985134054702),
}


@pytest.mark.parametrize("case", [MVB_CASES[0], pytest.param(MVB_CASES[1], marks=pytest.mark.slow)])
def test_against_mvb(case):
    pb, tnd, pb_opt, tnd_opt = MVB_VALUES[case]
    mask, pred, y = random_problem(*case)
    uniform = vb.forest_certificate(mask, pred, y)
    np.testing.assert_allclose([uniform.first_order, uniform.tandem], [pb, tnd], rtol=1e-8)
    # mvb stops its optimisation at its own tolerance; ours must do at least as well
    assert float(vb.forest_certificate(mask, pred, y, weights="first_order").first_order) \
        <= pb_opt + 1e-6
    assert float(vb.forest_certificate(mask, pred, y, weights="tandem").tandem) <= tnd_opt + 1e-6


# ---------------------------------------------------------------------------------------------
# Bad arguments
@pytest.mark.parametrize("change, match", [
    (lambda a: dict(a, oob_mask=a["oob_mask"][0]), "oob_mask must be"),
    (lambda a: dict(a, predictions=a["predictions"][:, :-1]), "predictions must"),
    (lambda a: dict(a, y=a["y"][:-1]), "y must be"),
    (lambda a: dict(a, oob_mask=a["oob_mask"] * 2), "boolean"),
    (lambda a: dict(a, delta=1.5), "delta"),
    (lambda a: dict(a, weights="best"), "weights must"),
    (lambda a: dict(a, weights=np.ones(3)), "weights as an array"),
])
def test_bad_arguments_name_the_argument(change, match):
    mask, pred, y = random_problem(0, m=4, n=50)
    args = dict(oob_mask=mask.astype(int), predictions=pred, y=y)
    with pytest.raises(ValueError, match=match):
        vb.forest_certificate(**change(args))


def test_optimize_rho_bad_arguments():
    stats = vb.oob_statistics(*random_problem(0, m=3, n=40))
    with pytest.raises(ValueError, match="bound must"):
        vb.optimize_rho(stats, "second")
    with pytest.raises(ValueError, match="steps"):
        vb.optimize_rho(stats, steps=-1)
