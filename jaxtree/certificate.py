"""The PAC-Bayes certificate of a fitted PAC-Bayes tree, and λ chosen by minimising it.

A posterior ``Q`` over the prunings of T0 comes with a generalization guarantee: Proposition 1
of Nguyen & Kpotufe (2018), the bound of Thiemann, Igel, Wintenberger & Seldin (2017). For a
prior ``P`` fixed before the sample ``S`` of ``n ≥ 8`` points is seen and ``δ ∈ (0, 1)``, with
probability at least ``1 − δ`` over ``S``, simultaneously for every ``λ ∈ (0, 2)`` and every
``Q``, the Gibbs risk ``R(Q) = E_{T∼Q} R(h_T)`` (0-1 loss) satisfies

    R(Q) ≤ R̂(Q) / (1 − λ/2) + (KL(Q‖P) + log(2√n/δ)) / (λ·(1 − λ/2)·n).

Since it holds for all λ at once, the λ minimising the right-hand side costs nothing; it has the
closed form ``λ* = 2 / (sqrt(2·n·R̂(Q) / (KL(Q‖P) + log(2√n/δ)) + 1) + 1)``. The majority vote
``h_Q`` errs only where the Gibbs classifier errs with probability ≥ ½, so ``R(h_Q) ≤ 2·R(Q)``
(for any number of classes).

Every quantity is an expectation under ``Q`` of a sum over a pruning's nodes, computed from the
engine's two passes, never by enumerating prunings:

* ``R̂(Q) = Σ_A w_Q(A)·E_A / n`` — ``w_Q(A)`` the probability that A is a leaf of the pruning,
  ``E_A`` the errors of S in A under the label ``l(A)``;
* ``KL(Q‖P) = Σ_{A split by T0} r_Q(A)·KL(Ber(ρ_Q(A)) ‖ Ber(ρ_P(A)))`` — both distributions are
  branching processes (:class:`jaxtree.PruningProcess`): ``r_Q(A)`` is the probability that A is
  a node of the random pruning and ``ρ(A)`` that A splits when it is one. ``log Q(T)/P(T)`` is a
  sum of one log-ratio per visited node (split or stop), whose expectation is this sum.

The priors are those of the paper's two readings, both multiplicative over leaves,
``P(T) ∝ Π_{A ∈ π(T)} e^{ψ(A)}``: the theory reading's ``P(T) ∝ e^{−3·D0·|π(T)|}`` (ψ = −3·D0
at every node; Theorem 1) and the practical reading's ``P(T) ∝ e^{−|π(T, S0)|}`` (ψ = −1 at the
nodes that hold points of the sample S0 that the prior is built on; Section 5).

**What is certified.** The bound holds only if T0, the labels ``l(A)`` and the prior are fixed
before S is seen. ``PACBayesTreeClassifier(certify=True)`` splits the training sample: T0, the
labels and the practical prior's counts come from one part S0, the posterior and the bound from
the other part S (see :meth:`jaxtree.PACBayesTreeClassifier.certificate`). With S0 = S (the
default fit) the same numbers are a diagnostic, not a guarantee.

Everything here is pure and jit-, vmap- and grad-compatible (inputs are checked on static shapes,
and on values when they are concrete).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxtree.engine import PruningProcess, local_offsets, pruning_process_from_offsets
from jaxtree.pacbayes import pacbayes_offsets, pacbayes_theory_offsets
from jaxtree.select import LOG_GRID, map_in_equal_chunks, settings_per_batch
from jaxtree.stats import NodeStats
from jaxtree.tree import Tree
from jaxtree.validation import is_traced

Array = jax.Array

#: Proposition 1 needs at least this many points.
MIN_SAMPLES = 8
#: Range of log λ searched by :func:`tune_by_bound` (that of the gradient tuning of the λ's).
LOG_LAMBDA_BOUNDS = (float(np.log(2.0 ** -12)), float(np.log(2.0 ** 10)))


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["gibbs_risk", "kl", "bound", "majority_vote_bound", "lam", "n",
                                "delta"], meta_fields=[])
@dataclasses.dataclass(frozen=True)
class Certificate:
    """The PAC-Bayes certificate of a posterior Q (every field a scalar; a pytree, so ``vmap``
    stacks them).

    Attributes:
        gibbs_risk: ``R̂(Q)``, the empirical Gibbs risk on the sample S of the bound.
        kl: ``KL(Q‖P)`` in nats.
        bound: Proposition 1's bound on the Gibbs risk ``R(Q)`` at the minimising λ (may
            exceed 1: then it says nothing).
        majority_vote_bound: ``2·bound``, a bound on the majority vote's risk ``R(h_Q)``.
        lam: the minimising ``λ ∈ (0, 2)``.
        n: the size of S.
        delta: the confidence parameter δ (the bound holds with probability ≥ 1 − δ).
    """

    gibbs_risk: Array
    kl: Array
    bound: Array
    majority_vote_bound: Array
    lam: Array
    n: Array
    delta: Array


# ---------------------------------------------------------------------------------------------
# Expectations under Q
def leaf_expectation(log_weights: Array, values: Array) -> Array:
    """``E_{T∼Q} Σ_{A ∈ π(T)} v(A) = Σ_A w_Q(A)·v(A)``: a scalar, from ``[nodes]`` log node
    weights (``−inf`` off the prunings' leaves; ``values`` there are not read)."""
    leaf = log_weights > -jnp.inf
    weight = jnp.exp(jnp.where(leaf, log_weights, 0))
    return jnp.sum(jnp.where(leaf, weight * values, 0))


def gibbs_risk(log_weights: Array, errors: Array, num_samples) -> Array:
    """``R̂(Q) = Σ_A w_Q(A)·E_A / n``: the expected training error of a pruning drawn from Q.

    Args:
      log_weights: ``[nodes]`` log node weights of Q.
      errors: ``[nodes]`` ``E_A``, errors of the sample in A under the label ``l(A)``.
      num_samples: ``n``.
    """
    return leaf_expectation(log_weights, errors) / num_samples


def prunings_kl(q: PruningProcess, p: PruningProcess) -> Array:
    """``KL(Q‖P)`` between two distributions over the prunings of one T0, as branching processes.

    ``Σ_A r_Q(A)·[ρ_Q log(ρ_Q/ρ_P) + (1 − ρ_Q) log((1 − ρ_Q)/(1 − ρ_P))](A)`` over the nodes Q
    reaches (a leaf of T0 stops under both: its term is 0). Each term is a probability times a
    difference of two log-probabilities of one node, so nothing of the size of ``log Q(T)``
    cancels. ``+inf`` where Q splits (or stops) a node that P never does. Gradients are finite
    wherever the KL is.
    """
    reached = q.log_reach > -jnp.inf
    local = (_plogq_over_p(q.log_split, p.log_split) + _plogq_over_p(q.log_stop, p.log_stop))
    reach = jnp.exp(jnp.where(reached, q.log_reach, 0))
    return jnp.sum(jnp.where(reached, reach * local, 0))


def _plogq_over_p(log_q, log_p):
    """``q·(log q − log p)`` elementwise, 0 where ``q = 0`` (and a gradient of 0 there)."""
    positive = log_q > -jnp.inf
    safe_q = jnp.where(positive, log_q, 0)
    return jnp.where(positive, jnp.exp(safe_q) * (safe_q - log_p), 0)


# ---------------------------------------------------------------------------------------------
# Proposition 1
def complexity(kl, num_samples, delta) -> Array:
    """``KL(Q‖P) + log(2·√n/δ)``, the numerator of Proposition 1's second term."""
    return kl + jnp.log(2 * jnp.sqrt(num_samples) / delta)


def bound_at(lam, gibbs_risk_, kl, num_samples, delta) -> Array:
    """Proposition 1's right-hand side at ``λ ∈ (0, 2)``:
    ``R̂/(1 − λ/2) + (KL + log(2√n/δ))/(λ(1 − λ/2)n)``."""
    shrink = 1 - lam / 2
    return gibbs_risk_ / shrink + complexity(kl, num_samples, delta) / (lam * shrink * num_samples)


def best_lambda(gibbs_risk_, kl, num_samples, delta) -> Array:
    """The λ minimising :func:`bound_at`: ``2 / (sqrt(2·n·R̂ / (KL + log(2√n/δ)) + 1) + 1)``
    (the positive root of ``R̂·λ²/2 + b·λ − b = 0``, ``b = (KL + log(2√n/δ))/n``); 1 when
    ``R̂ = 0``."""
    ratio = 2 * num_samples * gibbs_risk_ / complexity(kl, num_samples, delta)
    return 2 / (jnp.sqrt(ratio + 1) + 1)


def pac_bayes_bound(gibbs_risk_, kl, num_samples, delta=0.05) -> Certificate:
    """The certificate of a posterior of Gibbs risk ``R̂(Q)`` and divergence ``KL(Q‖P)`` on a
    sample of ``n ≥ 8`` points, at confidence ``1 − δ``: Proposition 1 at its minimising λ, and
    twice that for the majority vote. Scalars (traced values are fine)."""
    _check_confidence(num_samples, delta)
    lam = best_lambda(gibbs_risk_, kl, num_samples, delta)
    bound = bound_at(lam, gibbs_risk_, kl, num_samples, delta)
    dtype = jnp.result_type(bound)
    return Certificate(gibbs_risk=gibbs_risk_, kl=kl, bound=bound, majority_vote_bound=2 * bound,
                       lam=lam, n=jnp.asarray(num_samples, dtype),
                       delta=jnp.asarray(delta, dtype))


def _check_confidence(num_samples, delta):
    if not is_traced(delta) and not 0 < float(delta) < 1:
        raise ValueError(f"delta must be in (0, 1); got {delta!r}")
    if not is_traced(num_samples) and not float(num_samples) >= MIN_SAMPLES:
        raise ValueError(f"the bound needs at least {MIN_SAMPLES} points (Proposition 1 holds "
                         f"for n >= 8); got n = {float(num_samples):g}")


# ---------------------------------------------------------------------------------------------
# Certificates of multiplicative posteriors
def certificate_from_offsets(offset: Array, prior_offset: Array, internal: Array, errors: Array,
                             num_samples, delta=0.05, layout=None) -> Certificate:
    """The certificate of the posterior of local offsets ``offset`` against the prior of local
    offsets ``prior_offset`` (both ``[nodes]``, as :func:`jaxtree.local_offsets` forms them from
    potentials), ``errors`` ``[nodes]`` the ``E_A`` of the sample S of ``num_samples`` points.
    One pass pair for Q, one for P."""
    prior = pruning_process_from_offsets(prior_offset, internal, layout)
    return _certificate_against(offset, prior, internal, errors, num_samples, delta, layout)


def _certificate_against(offset, prior: PruningProcess, internal, errors, num_samples, delta,
                         layout) -> Certificate:
    """:func:`certificate_from_offsets` with the prior's process already formed."""
    _check_confidence(num_samples, delta)
    q = pruning_process_from_offsets(offset, internal, layout)
    risk = gibbs_risk(q.log_weights, errors, num_samples)
    return pac_bayes_bound(risk, prunings_kl(q, prior), num_samples, delta)


def practical_prior_offsets(tree: Tree, prior_stats: NodeStats) -> Array:
    """``[nodes]`` local offsets of the practical prior ``P(T) ∝ e^{−|π(T, S0)|}`` (ψ(A) = −1
    where S0 has points in A, 0 elsewhere), ``prior_stats`` the statistics of S0."""
    psi = jnp.where(prior_stats.total > 0, -1.0, 0.0).astype(prior_stats.counts.dtype)
    return local_offsets(psi, tree.internal, layout=tree.layout)


def theory_prior_offsets(tree: Tree) -> Array:
    """``[nodes]`` local offsets of the theory prior ``P(T) ∝ e^{−3·D0·|π(T)|}`` (Theorem 1;
    ``D0`` = ``tree.depth``, every leaf counted): ``−3·D0`` where T0 splits."""
    psi = jnp.full(tree.internal.shape, -3.0 * tree.depth, tree.threshold.dtype)
    return local_offsets(psi, tree.internal, layout=tree.layout)


def pacbayes_certificate(tree: Tree, stats: NodeStats, lam1, lam2, delta=0.05,
                         prior_stats: Optional[NodeStats] = None) -> Certificate:
    """Certificate of the practical PAC-Bayes posterior (:func:`jaxtree.pacbayes_log_weights`
    of ``stats`` and ``prior_stats``) against the practical prior.

    Args:
      tree: T0.
      stats: the sample S of the bound: its counts, with the labels ``l(A)`` (from S0 when T0
        and the labels come from another sample: ``NodeStats(counts_S, labels_S0)``).
      lam1, lam2: the posterior's λ's (scalars > 0; traced values are fine).
      delta: confidence δ ∈ (0, 1).
      prior_stats: statistics of S0, whose non-empty nodes the prior counts, and the
        posterior's leaf cost with it; None: ``stats`` (then the prior depends on S and the
        number is not a certificate).
    """
    offset = pacbayes_offsets(tree, stats, lam1, lam2, prior_stats)
    prior = practical_prior_offsets(tree, stats if prior_stats is None else prior_stats)
    return certificate_from_offsets(offset, prior, tree.internal, stats.errors,
                                    stats.num_samples, delta, tree.layout)


def pacbayes_theory_certificate(tree: Tree, stats: NodeStats, lam, delta=0.05,
                                potentials_delta=0.05) -> Certificate:
    """Certificate of the theory posterior (:func:`jaxtree.pacbayes_theory_log_weights` with
    λ = ``lam`` and ``potentials_delta``) against the theory prior ``e^{−3·D0·|π(T)|}``;
    ``stats`` as in :func:`pacbayes_certificate`."""
    offset = pacbayes_theory_offsets(tree, stats, lam, potentials_delta)
    return certificate_from_offsets(offset, theory_prior_offsets(tree), tree.internal,
                                    stats.errors, stats.num_samples, delta, tree.layout)


# ---------------------------------------------------------------------------------------------
# λ by the bound
@dataclasses.dataclass(frozen=True)
class BoundTuning:
    """Outcome of :func:`tune_by_bound`.

    Attributes:
        best_params: ``{name: float}`` the λ's of least bound met (grid or gradient path).
        best_bound: that bound.
        grid_bound: the least bound on the starting grid.
        path: ``{name: [steps] array}`` the λ's of each Adam step, and ``"bound"`` ``[steps]``.
    """

    best_params: dict
    best_bound: float
    grid_bound: float
    path: dict


def tune_by_bound(tree: Tree, stats: NodeStats, potentials="practical", delta=0.05,
                  prior_stats: Optional[NodeStats] = None, potentials_delta=0.05,
                  steps: int = 100, learning_rate: float = 0.1,
                  log_bounds=LOG_LAMBDA_BOUNDS) -> BoundTuning:
    """The posterior's λ's chosen by minimising its certificate's bound: no validation data.

    The bound is evaluated on the product of the paper's log grid (:data:`jaxtree.select.LOG_GRID`
    per λ, one ``vmap``), then Adam (optax) runs ``steps`` steps on ``log λ`` from the best grid
    point, clipped to ``log_bounds``, in one compiled ``lax.scan``; the result is the least bound
    met. Since Proposition 1 holds for every Q at once, choosing Q by it keeps the guarantee.

    Args:
      tree, stats, delta, prior_stats: as in :func:`pacbayes_certificate`.
      potentials: ``"practical"`` (tunes ``lam1``, ``lam2``) or ``"theory"`` (tunes ``lam1``,
        the theory posterior's λ; ``potentials_delta`` is its δ).
    """
    if potentials not in ("practical", "theory"):
        raise ValueError(f"potentials must be 'practical' or 'theory'; got {potentials!r}")
    _check_confidence(stats.num_samples, delta)
    if not (isinstance(steps, int) and steps >= 1):
        raise ValueError(f"steps must be a positive int; got {steps!r}")
    dtype = stats.counts.dtype
    if potentials == "practical":
        names, objective = ("lam1", "lam2"), _practical_bound
        extra = stats if prior_stats is None else prior_stats
        prior = practical_prior_offsets(tree, extra)
    else:
        names, objective = ("lam1",), _theory_bound
        prior, extra = theory_prior_offsets(tree), jnp.asarray(potentials_delta, dtype)
    prior_process = pruning_process_from_offsets(prior, tree.internal, tree.layout)
    args = (tree, stats, prior_process, jnp.asarray(delta, dtype), extra)
    grid = jnp.log(jnp.asarray(list(itertools.product(LOG_GRID, repeat=len(names))), dtype))
    grid_bounds, thetas, bounds = _grid_then_adam(objective, grid, args, steps, learning_rate,
                                                  *log_bounds,
                                                  batch_size=settings_per_batch(tree.num_nodes))
    start = grid[jnp.argmin(grid_bounds)]
    all_thetas = jnp.concatenate([start[None], thetas])
    all_bounds = jnp.concatenate([jnp.min(grid_bounds)[None], bounds])
    best = int(jnp.argmin(jnp.where(jnp.isnan(all_bounds), jnp.inf, all_bounds)))
    lams = np.exp(np.asarray(thetas, np.float64))
    return BoundTuning(
        best_params={name: float(np.exp(all_thetas[best, i])) for i, name in enumerate(names)},
        best_bound=float(all_bounds[best]), grid_bound=float(jnp.min(grid_bounds)),
        path={**{name: lams[:, i] for i, name in enumerate(names)},
              "bound": np.asarray(bounds, np.float64)})


def _practical_bound(log_lams, tree, stats, prior, delta, prior_stats):
    offset = pacbayes_offsets(tree, stats, jnp.exp(log_lams[0]), jnp.exp(log_lams[1]),
                              prior_stats)
    return _certificate_against(offset, prior, tree.internal, stats.errors, stats.num_samples,
                                delta, tree.layout).bound


def _theory_bound(log_lams, tree, stats, prior, delta, potentials_delta):
    offset = pacbayes_theory_offsets(tree, stats, jnp.exp(log_lams[0]), potentials_delta)
    return _certificate_against(offset, prior, tree.internal, stats.errors, stats.num_samples,
                                delta, tree.layout).bound


@functools.partial(jax.jit, static_argnames=("objective", "steps", "batch_size"))
def _grid_then_adam(objective, grid, args, steps, learning_rate, lo, hi, batch_size):
    """``objective(theta, *args)`` on every row of ``grid`` ``[G, k]``, then ``steps`` Adam
    steps from the best row: ``(grid values [G], thetas [steps, k], values [steps])``, each
    value at the θ before its step. One program. The grid rows are evaluated ``batch_size`` at
    a time (:func:`jaxtree.select.settings_per_batch` keeps their intermediates within ~0.5 GiB:
    a bound takes ~24 bytes per node and setting, and a 26-million-node dyadic T0 asked 64 GB
    for the whole grid at once)."""
    grid_values = map_in_equal_chunks(lambda theta: objective(theta, *args), grid, batch_size)
    optimizer = optax.adam(learning_rate)

    def step(carry, _):
        theta, state = carry
        value, grad = jax.value_and_grad(objective)(theta, *args)
        updates, state = optimizer.update(grad, state, theta)
        new_theta = jnp.clip(optax.apply_updates(theta, updates), lo, hi)
        return (new_theta, state), (theta, value)

    theta = grid[jnp.argmin(grid_values)]
    _, (thetas, values) = jax.lax.scan(step, (theta, optimizer.init(theta)), None, length=steps)
    return grid_values, thetas, values
