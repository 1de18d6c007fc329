"""The PAC-Bayes certificate: R̂(Q) and KL(Q‖P) against enumeration of every pruning, the bound's
closed-form λ, its gradients, and the estimator's certify / tune="bound" options."""

import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtree
from jaxtree import certificate as cert
from jaxtree import fitting, shapes
from jaxtree.engine import local_offsets
from test_engine import (brute_force, prunings, random_potentials, tolerance,
                         trees_for_tests)


# -- reference: enumeration of every pruning -----------------------------------------------------
def enumerated(leaf_q, leaf_p, errors, internal):
    """``(R̂(Q)·n, KL(Q‖P))`` by summing over every pruning; ``Q(T) ∝ Π_{leaves} e^{leaf_q}``,
    likewise P."""
    trees = [list(leaves) for leaves, _ in prunings(internal)]

    def log_probabilities(leaf):
        scores = np.array([np.asarray(leaf, np.float64)[t].sum() for t in trees])
        return scores - np.logaddexp.reduce(scores)

    log_q, log_p = log_probabilities(leaf_q), log_probabilities(leaf_p)
    q = np.exp(log_q)
    expected_errors = sum(qt * np.asarray(errors, np.float64)[t].sum() for qt, t in zip(q, trees))
    return expected_errors, float(np.sum(q * (log_q - log_p)))


def test_gibbs_risk_and_kl_match_enumeration(precision):
    """On random trees of depth <= 5 (padding holding garbage), random posteriors and priors."""
    rng, cases = trees_for_tests(30, 2)
    for internal, in_tree in cases:
        leaf_q, _ = random_potentials(rng, in_tree, internal, with_split=False)
        leaf_p, _ = random_potentials(rng, in_tree, internal, scale=1.0, with_split=False)
        errors = np.where(in_tree, rng.integers(0, 20, in_tree.shape), 0).astype(float)
        n = 50.0
        offsets = [local_offsets(jnp.asarray(leaf, precision), internal) for leaf in
                   (leaf_q, leaf_p)]
        got = cert.certificate_from_offsets(*offsets, internal, jnp.asarray(errors, precision), n)
        errors_ref, kl_ref = enumerated(leaf_q, leaf_p, errors, internal)
        atol = 50 * tolerance(precision)
        assert float(got.gibbs_risk) == pytest.approx(errors_ref / n, rel=atol, abs=atol)
        assert float(got.kl) == pytest.approx(kl_ref, rel=atol, abs=atol)
        assert kl_ref >= 0 and float(got.bound) >= float(got.gibbs_risk)


@pytest.fixture(scope="module")
def certified_problem():
    """A KD T0 on S0 (150 points) and the statistics of S (200 points) with S0's labels."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(350, 3))
    y = (X[:, 0] + 0.7 * rng.normal(size=350) > 0).astype(int)
    tree = jaxtree.kd_tree(X[:150], max_depth=4, y=y[:150])
    prior_stats = jaxtree.node_stats(tree, X[:150], y[:150], 2)
    sample = jaxtree.node_stats(tree, X[150:], y[150:], 2)
    return tree, jaxtree.NodeStats(sample.counts, prior_stats.label), prior_stats, X, y


def test_practical_and_theory_certificates_match_enumeration(certified_problem):
    """The PAC-Bayes posteriors of a real T0 against both readings' priors, by enumeration."""
    tree, stats, prior_stats, _, _ = certified_problem
    internal = np.asarray(tree.internal)
    errors = np.asarray(stats.errors)
    n = float(stats.num_samples)
    q = np.asarray(jaxtree.pacbayes_potentials(stats, 2.0, 0.5, prior_stats))
    p = np.where(np.asarray(prior_stats.total) > 0, -1.0, 0.0)
    got = cert.pacbayes_certificate(tree, stats, 2.0, 0.5, prior_stats=prior_stats)
    errors_ref, kl_ref = enumerated(q, p, errors, internal)
    assert float(got.gibbs_risk) == pytest.approx(errors_ref / n, rel=1e-4)
    assert float(got.kl) == pytest.approx(kl_ref, rel=1e-4, abs=1e-4)

    q = np.asarray(jaxtree.pacbayes_theory_potentials(tree, stats, 0.7, 0.1))
    p = np.full(internal.shape, -3.0 * tree.depth)
    got = cert.pacbayes_theory_certificate(tree, stats, 0.7, potentials_delta=0.1)
    errors_ref, kl_ref = enumerated(q, p, errors, internal)
    assert float(got.gibbs_risk) == pytest.approx(errors_ref / n, rel=1e-4)
    assert float(got.kl) == pytest.approx(kl_ref, rel=1e-4, abs=1e-4)


def test_certified_posterior_is_the_prior_times_the_data_term(certified_problem):
    """With T0 and the prior from S0 and the counts from a smaller S that leaves cells of S0
    empty, the posterior is ``Q(T) ∝ P(T)·e^{−λ1·ΣE − λ2·Σ√N}`` (the leaf cost where S0 has
    points, the prior's), by enumeration of every pruning; its certificate is that Q's. The
    theory reading's posterior likewise carries its prior's leaf cost, at every leaf."""
    tree, _, prior_stats, X, y = certified_problem
    small = jaxtree.node_stats(tree, X[150:170], y[150:170], 2)
    stats = jaxtree.NodeStats(small.counts, prior_stats.label)
    occupied = np.asarray(prior_stats.total) > 0
    assert np.any(occupied & (np.asarray(stats.total) == 0))   # S misses cells of S0
    internal = np.asarray(tree.internal)
    errors, total = np.asarray(stats.errors, np.float64), np.asarray(stats.total, np.float64)
    p = np.where(occupied, -1.0, 0.0)
    q = -2.0 * errors - 0.5 * np.sqrt(total) + p
    w_ref, _, _ = brute_force(q, None, internal)
    log_w = jaxtree.pacbayes_log_weights(tree, stats, 2.0, 0.5, prior_stats=prior_stats)
    np.testing.assert_allclose(np.exp(np.asarray(log_w, np.float64)), w_ref, atol=1e-5)
    np.testing.assert_allclose(np.asarray(jaxtree.pacbayes_potentials(stats, 2.0, 0.5,
                                                                      prior_stats)), q, rtol=1e-6)
    got = cert.pacbayes_certificate(tree, stats, 2.0, 0.5, prior_stats=prior_stats)
    errors_ref, kl_ref = enumerated(q, p, errors, internal)
    assert float(got.gibbs_risk) == pytest.approx(errors_ref / 20, rel=1e-4)
    assert float(got.kl) == pytest.approx(kl_ref, rel=1e-4, abs=1e-4)
    # charging only S's non-empty cells leaves S's empty subtrees free: another, deeper Q
    free = jaxtree.pacbayes_log_weights(tree, stats, 2.0, 0.5)
    assert not np.allclose(np.exp(np.asarray(free)), w_ref, atol=1e-3)
    # the theory reading: its prior e^{−3·D0·|π(T)|} charges every leaf, S's empty ones too
    in_tree, n = in_tree_of(tree), 20
    p_theory = np.where(in_tree, -3.0 * tree.depth, 0.0)
    q_theory = (-0.7 * errors - 0.7 * n * np.sqrt(2 * total / n * np.log(in_tree.sum() / 0.1) / n)
                + p_theory)
    w_theory, _, _ = brute_force(q_theory, None, internal)
    log_w = jaxtree.pacbayes_theory_log_weights(tree, stats, 0.7, 0.1)
    np.testing.assert_allclose(np.exp(np.asarray(log_w, np.float64)), w_theory, atol=1e-5)
    got = cert.pacbayes_theory_certificate(tree, stats, 0.7, potentials_delta=0.1)
    errors_ref, kl_ref = enumerated(q_theory, p_theory, errors, internal)
    assert float(got.kl) == pytest.approx(kl_ref, rel=1e-4, abs=1e-4)


def in_tree_of(tree):
    """``[nodes]`` bool: the slots that hold a node of T0 (a complete layout's heap)."""
    return np.asarray(jax.jit(jaxtree.tree_membership)(tree.internal))


# -- Proposition 1 -------------------------------------------------------------------------------
@pytest.mark.parametrize("risk, kl, n", [(0.0, 0.0, 8), (0.0, 3.0, 100), (0.2, 5.0, 1000),
                                         (0.45, 120.0, 500), (0.01, 0.1, 10 ** 6)])
def test_closed_form_lambda_minimises_the_bound(risk, kl, n):
    grid = np.linspace(1e-4, 2 - 1e-4, 200001)
    values = np.asarray(cert.bound_at(grid, risk, kl, n, 0.05))
    result = cert.pac_bayes_bound(risk, kl, n, 0.05)
    assert float(result.bound) == pytest.approx(values.min(), rel=1e-5)
    assert float(result.lam) == pytest.approx(grid[values.argmin()], abs=1e-3)
    assert 0 < float(result.lam) < 2
    assert float(result.bound) >= risk
    assert float(result.majority_vote_bound) == pytest.approx(2 * float(result.bound))
    # the bound as written in the paper (Proposition 1)
    lam = float(result.lam)
    paper = risk / (1 - lam / 2) + (kl + np.log(2 * np.sqrt(n) / 0.05)) / (lam * (1 - lam / 2) * n)
    assert float(result.bound) == pytest.approx(paper, rel=1e-5)


def test_bound_is_never_below_the_gibbs_risk_and_its_gradients_are_finite(certified_problem):
    """Over λ's from 2^-8 to 2^6, under jit and vmap: bound >= R̂(Q), KL >= 0, finite gradients
    of the bound in both λ's, and the batched values equal to single calls."""
    tree, stats, prior_stats, _, _ = certified_problem

    def certificate(lam1, lam2):
        return cert.pacbayes_certificate(tree, stats, lam1, lam2, prior_stats=prior_stats)

    def with_gradient(lam1, lam2):
        grads = jax.grad(lambda a, b: certificate(a, b).bound, argnums=(0, 1))(lam1, lam2)
        return certificate(lam1, lam2), grads

    lam1 = jnp.asarray(2.0 ** np.linspace(-8, 6, 12), jnp.float32)
    lam2 = jnp.asarray(np.random.default_rng(0).permutation(np.asarray(lam1)))
    certificates, grads = jax.jit(jax.vmap(with_gradient))(lam1, lam2)
    assert certificates.bound.shape == (12,)
    assert np.all(np.asarray(certificates.bound) >= np.asarray(certificates.gibbs_risk))
    assert np.all(np.asarray(certificates.kl) >= -1e-4)
    single = certificate(lam1[5], lam2[5])
    assert float(certificates.bound[5]) == pytest.approx(float(single.bound), rel=1e-5)
    assert all(np.isfinite(np.asarray(g)).all() for g in grads)
    assert np.any(np.asarray(grads[0]) != 0) and np.any(np.asarray(grads[1]) != 0)


def test_bad_confidence_is_refused():
    with pytest.raises(ValueError, match="delta"):
        cert.pac_bayes_bound(0.1, 1.0, 100, delta=1.5)
    with pytest.raises(ValueError, match="at least 8"):
        cert.pac_bayes_bound(0.1, 1.0, 5, delta=0.05)


def test_tune_by_bound_never_ends_above_the_grid(certified_problem):
    """On a depth-2 T0 (a small program to compile; the estimator's case is marked slow)."""
    *_, X, y = certified_problem
    tree = jaxtree.kd_tree(X[:150], max_depth=2, y=y[:150])
    prior_stats = jaxtree.node_stats(tree, X[:150], y[:150], 2)
    stats = jaxtree.NodeStats(jaxtree.node_stats(tree, X[150:], y[150:], 2).counts,
                              prior_stats.label)
    result = cert.tune_by_bound(tree, stats, prior_stats=prior_stats, steps=10)
    assert result.best_bound <= result.grid_bound
    assert set(result.best_params) == {"lam1", "lam2"} and len(result.path["bound"]) == 10
    again = cert.pacbayes_certificate(tree, stats, result.best_params["lam1"],
                                      result.best_params["lam2"], prior_stats=prior_stats)
    assert float(again.bound) == pytest.approx(result.best_bound, rel=1e-5)
    with pytest.raises(ValueError, match="potentials"):
        cert.tune_by_bound(tree, stats, potentials="other")


def test_tune_by_bound_evaluates_its_grid_in_chunks_alike(certified_problem, monkeypatch):
    """A grid evaluated one setting at a time (the memory budget of a huge T0) gives the same
    bounds and Adam path as all settings at once."""
    *_, X, y = certified_problem
    tree = jaxtree.kd_tree(X[:150], max_depth=2, y=y[:150])
    prior_stats = jaxtree.node_stats(tree, X[:150], y[:150], 2)
    stats = jaxtree.NodeStats(jaxtree.node_stats(tree, X[150:], y[150:], 2).counts,
                              prior_stats.label)
    whole = cert.tune_by_bound(tree, stats, prior_stats=prior_stats, steps=3)
    monkeypatch.setattr(jaxtree.select, "_GRID_MEMORY_BUDGET", 1)    # one setting per chunk
    assert jaxtree.select.settings_per_batch(tree.num_nodes) == 1
    chunked = cert.tune_by_bound(tree, stats, prior_stats=prior_stats, steps=4)
    assert chunked.grid_bound == pytest.approx(whole.grid_bound, rel=1e-6)
    np.testing.assert_allclose(chunked.path["bound"][:3], whole.path["bound"], rtol=1e-6)


# -- the estimator -------------------------------------------------------------------------------
def test_certified_fit_splits_the_sample(certified_problem):
    """T0 and the labels from S0, the counts of the posterior from S; the Gibbs risk on S is the
    mean of 1 − score of the true class over S's points (an independent computation)."""
    *_, X, y = certified_problem
    model = jaxtree.PACBayesTreeClassifier(partition="kd", split="cycle", max_depth=4, lam1=2.0,
                                           lam2=0.5, certify=0.4, proba="majority",
                                           random_state=1).fit(X, y)
    # S0: the share 0.4 of the distinct feature vectors, dealt by the hold-out key of random_state=1
    key = jax.random.fold_in(jax.random.PRNGKey(1), 1)
    prior, _ = np.asarray(fitting.holdout_weights(X.astype(np.float32), np.ones(len(y)), key,
                                                  0.4))
    prior_rows, rows = np.flatnonzero(prior), np.flatnonzero(prior == 0)
    assert len(prior_rows) == round(0.4 * len(y))
    tree = jaxtree.kd_tree(X[prior_rows], max_depth=4, y=y[prior_rows])
    internal = np.asarray(model.tree_.internal)
    np.testing.assert_allclose(np.sort(np.asarray(model.tree_.threshold)[internal]),
                               np.sort(np.asarray(tree.threshold)[np.asarray(tree.internal)]),
                               rtol=1e-6)
    assert float(model.prior_stats_.num_samples) == len(prior_rows)
    assert float(model.stats_.num_samples) == len(rows)
    np.testing.assert_array_equal(np.asarray(model.stats_.label),
                                  np.asarray(model.prior_stats_.label))
    result = model.certificate(delta=0.1)
    assert isinstance(result, jaxtree.Certificate) and isinstance(result.bound, float)
    assert result.n == len(rows) and result.delta == pytest.approx(0.1)
    proba = model.predict_proba(X[rows])
    assert result.gibbs_risk == pytest.approx(1 - proba[np.arange(len(rows)), y[rows]].mean(),
                                              rel=1e-5)
    assert result.gibbs_risk <= result.bound <= result.majority_vote_bound
    # the default fit: one sample for everything
    full = jaxtree.PACBayesTreeClassifier(partition="kd", split="cycle", max_depth=4, lam1=2.0,
                                          lam2=0.5).fit(X[150:], y[150:])
    assert full.certificate().n == 200 and not hasattr(full, "prior_stats_")
    # a saved certified model gives the same certificate
    buffer = io.BytesIO()
    model.save(buffer)
    buffer.seek(0)
    assert jaxtree.load(buffer).certificate(delta=0.1) == result


def test_certified_estimator_charges_the_leaves_of_s0(certified_problem):
    """A certified fit whose S misses cells of S0 (a deep KD T0 on 60 points): the estimator's
    posterior is :func:`jaxtree.pacbayes_log_weights` with S0's statistics, not with S's
    alone, and its certificate is that posterior's."""
    *_, X, y = certified_problem
    model = jaxtree.PACBayesTreeClassifier(partition="kd", split="cycle", max_depth=6, lam1=2.0,
                                           lam2=0.5, certify=True).fit(X[:120], y[:120])
    tree, stats, prior_stats = model.tree_, model.stats_, model.prior_stats_
    assert np.any((np.asarray(prior_stats.total) > 0) & (np.asarray(stats.total) == 0))
    expected = jaxtree.pacbayes_log_weights(tree, stats, 2.0, 0.5, prior_stats=prior_stats)
    np.testing.assert_allclose(np.asarray(model.node_log_weights_), np.asarray(expected))
    free = jaxtree.pacbayes_log_weights(tree, stats, 2.0, 0.5)
    assert not np.allclose(np.asarray(model.node_log_weights_), np.asarray(free))
    offsets = jaxtree.pacbayes_offsets(tree, stats, 2.0, 0.5, prior_stats)
    again = cert.certificate_from_offsets(offsets, cert.practical_prior_offsets(tree, prior_stats),
                                          tree.internal, stats.errors, stats.num_samples, 0.05,
                                          tree.layout)
    assert model.certificate(delta=0.05).kl == pytest.approx(float(again.kl), rel=1e-5)


@pytest.mark.parametrize("certify", [1.5, 0.0, "yes", -1])
def test_bad_certify_is_refused(certify, certified_problem):
    *_, X, y = certified_problem
    with pytest.raises(ValueError, match="certify"):
        jaxtree.PACBayesTreeClassifier(partition="kd", split="cycle", max_depth=2, lam1=1.0,
                                       lam2=1.0, certify=certify).fit(X, y)


@pytest.mark.slow
@pytest.mark.parametrize("potentials", ["practical", "theory"])
def test_tune_by_bound_in_the_estimator(potentials, certified_problem):
    *_, X, y = certified_problem
    model = jaxtree.PACBayesTreeClassifier(partition="kd", split="cycle", max_depth=4, certify=True, tune="bound",
                                           potentials=potentials).fit(X, y)
    names = {"lam1", "lam2"} if potentials == "practical" else {"lam1"}
    assert set(model.best_params_) == names
    result = model.certificate(delta=model.delta)
    assert result.bound == pytest.approx(float(np.min(model.cv_results_["bound"])), rel=1e-3) \
        or result.bound <= float(np.min(model.cv_results_["bound"]))
    grid_fit = jaxtree.PACBayesTreeClassifier(partition="kd", split="cycle", max_depth=4, certify=True, lam1=1.0, lam2=1.0,
                                              potentials=potentials).fit(X, y)
    assert result.bound <= grid_fit.certificate().bound
