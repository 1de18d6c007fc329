"""Out-of-bag PAC-Bayes bounds on the risk of a weighted majority vote of trees (a forest).

A forest of ``m`` trees, each grown on a bootstrap sample, leaves every tree a set of training
points it never saw: its *out-of-bag* (OOB) points. From the OOB predictions alone, with
probability at least ``1 − δ`` and simultaneously for every weighting ``ρ`` of the trees
(Masegosa, Lorenzen, Igel & Seldin, "Second Order PAC-Bayesian Bounds for the Weighted Majority
Vote", NeurIPS 2020; the definitions below follow their reference implementation, the ``mvb``
package, in every constant):

* **first order**: ``R(MV_ρ) ≤ 2·kl⁻¹(L̂(ρ), (KL(ρ‖π) + log(2√n/δ)) / n)`` with the ρ-weighted
  Gibbs loss ``L̂(ρ) = Σ_h ρ_h·L̂_h``, ``L̂_h`` tree h's error rate on its own OOB points, and
  ``n = min_h n_h`` the smallest OOB sample;
* **tandem** (second order): ``R(MV_ρ) ≤ 4·kl⁻¹(L̂(ρ²), (2·KL(ρ‖π) + log(2√n₂/δ)) / n₂)`` with
  the tandem loss ``L̂(ρ²) = Σ_{h,h'} ρ_h ρ_h' L̂_{hh'}``, ``L̂_{hh'}`` the rate at which h and
  h' err *together* on the points out of bag for both, and ``n₂ = min_{h,h'} n_{hh'}`` (the
  diagonal included: ``n_{hh} = n_h``).

``π`` is the uniform prior over the trees and ``kl⁻¹(q, ε) = max{p ∈ [q, 1] : kl(q‖p) ≤ ε}``
(:func:`kl_inverse_upper`). As in ``mvb`` the first-order bound is ``2·min(1, kl⁻¹)`` and the
tandem bound ``4·min(1/4, kl⁻¹)``; each holds with probability ``1 − δ`` by itself (the smaller
of the two, picked after seeing both, holds with ``1 − 2δ``). The math and a proof sketch are in
``docs/theory/forest.md``.

Everything is pure and jit-, vmap- and grad-compatible; it computes in the dtype of its inputs
(float64 under ``jax.enable_x64``, which :func:`forest_certificate` turns on for its own call).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Union

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.scipy.special import xlog1py, xlogy

from jaxtree.validation import is_traced

Array = jax.Array

#: Bisection steps of :func:`kl_inverse_upper` (the bracket shrinks to 2**-64 of [q, 1]).
KL_INVERSE_STEPS = 64
#: Adam steps and learning rate of :func:`optimize_rho` (on the logits of ρ).
RHO_STEPS = 1000
RHO_LEARNING_RATE = 0.1
BOUNDS = ("first_order", "tandem")


# ---------------------------------------------------------------------------------------------
# kl and its inverse
def kl_bernoulli(q, p) -> Array:
    """``kl(q‖p) = q·log(q/p) + (1 − q)·log((1 − q)/(1 − p))``, elementwise (broadcasting).

    Args:
      q, p: arrays of probabilities in ``[0, 1]`` (``0·log 0 = 0``; ``+inf`` where ``p`` is 0
        or 1 and ``q`` is not).
    """
    q, p = jnp.asarray(q), jnp.asarray(p)
    return xlogy(q, q) - xlogy(q, p) + xlogy(1 - q, 1 - q) - xlog1py(1 - q, -p)


@jax.custom_jvp
def kl_inverse_upper(q, bound) -> Array:
    """The largest ``p ∈ [q, 1]`` with ``kl(q‖p) ≤ bound``, elementwise (broadcasting).

    Bisection on ``[q, 1]`` (``kl(q‖·)`` increases there), :data:`KL_INVERSE_STEPS` fixed steps;
    the upper end of the final bracket is returned, so the result is never below the exact
    value (at most ``2**-64`` above it in float64). ``bound = inf`` gives 1.

    Differentiable in both arguments (implicit function theorem on ``kl(q‖p) = bound``).

    Args:
      q: ``[...]`` empirical risks in ``[0, 1]``.
      bound: ``[...]`` right-hand sides ``≥ 0``.
    """
    q, bound = jnp.broadcast_arrays(*_as_floats(q, bound))

    def step(_, bracket):
        lo, hi = bracket
        mid = (lo + hi) / 2
        inside = kl_bernoulli(q, mid) <= bound
        return jnp.where(inside, mid, lo), jnp.where(inside, hi, mid)

    _, hi = jax.lax.fori_loop(0, KL_INVERSE_STEPS, step, (q, jnp.ones_like(q)))
    return hi


def _as_floats(*xs):
    dtype = jnp.result_type(float, *[jnp.asarray(x).dtype for x in xs])
    return [jnp.asarray(x, dtype) for x in xs]


@kl_inverse_upper.defjvp
def _kl_inverse_upper_jvp(primals, tangents):
    q, bound = _as_floats(*primals)
    dq, dbound = _as_floats(*tangents)
    p = kl_inverse_upper(q, bound)
    # F(q, p) = kl(q‖p) − bound = 0  ⇒  dp = (dbound − ∂_q kl · dq) / ∂_p kl.
    d_p = (p - q) / (p * (1 - p))
    d_q = jnp.log(q / p) - jnp.log((1 - q) / (1 - p))
    inner = (p < 1) & (d_p > 0)   # at p = 1 the constraint is inactive; at p = q it is flat
    safe = jnp.where(inner, d_p, 1)
    dp = jnp.where(inner, (dbound - jnp.where(inner, d_q, 0) * dq) / safe, 0)
    return p, dp


# ---------------------------------------------------------------------------------------------
# Out-of-bag statistics
@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["errors", "sizes", "tandem_errors", "pair_sizes"], meta_fields=[])
@dataclasses.dataclass(frozen=True)
class OOBStats:
    """Counts from a forest's out-of-bag predictions (a pytree).

    Attributes:
      errors: ``[m]`` int32, tree h's errors on its OOB points.
      sizes: ``[m]`` int32, ``n_h``, tree h's number of OOB points.
      tandem_errors: ``[m, m]`` int32, points OOB for both h and h' on which both err
        (diagonal: ``errors``).
      pair_sizes: ``[m, m]`` int32, ``n_{hh'}``, points OOB for both (diagonal: ``sizes``).
    """

    errors: Array
    sizes: Array
    tandem_errors: Array
    pair_sizes: Array

    @property
    def gibbs_losses(self) -> Array:
        """``[m]`` ``L̂_h = errors / sizes`` (0 for a tree without OOB points)."""
        return _rate(self.errors, self.sizes)

    @property
    def tandem_losses(self) -> Array:
        """``[m, m]`` ``L̂_{hh'} = tandem_errors / pair_sizes`` (0 where no point is OOB for
        both)."""
        return _rate(self.tandem_errors, self.pair_sizes)

    @property
    def n_min(self) -> Array:
        """The smallest OOB sample of a tree, ``min_h n_h`` (the first-order bound's n)."""
        return jnp.min(self.sizes)

    @property
    def n2_min(self) -> Array:
        """The smallest OOB sample of a pair, ``min_{h,h'} n_{hh'}`` (the tandem bound's n)."""
        return jnp.min(self.pair_sizes)


def _rate(count, size):
    dtype = jnp.result_type(float)  # float64 under x64 (int32 / int32 would give float32)
    count, size = jnp.asarray(count, dtype), jnp.asarray(size, dtype)
    return jnp.where(size > 0, count / jnp.maximum(size, 1), 0.0)


def oob_statistics(oob_mask, predictions, y) -> OOBStats:
    """The out-of-bag counts of a forest (:class:`OOBStats`).

    Args:
      oob_mask: ``[m, n]`` bool, ``oob_mask[h, i]`` when training point i is out of bag for
        tree h (not in its bootstrap sample).
      predictions: ``[m, n]`` int, tree h's predicted label of point i (read only where
        ``oob_mask`` holds).
      y: ``[n]`` int, the labels.

    Counts are int32 matrix products, exact for any n below 2**31.
    """
    oob_mask, predictions, y = _check_oob(oob_mask, predictions, y)
    mask = jnp.asarray(oob_mask, jnp.int32)
    wrong = mask * (jnp.asarray(predictions) != jnp.asarray(y)[None, :])
    return OOBStats(errors=jnp.sum(wrong, axis=1), sizes=jnp.sum(mask, axis=1),
                    tandem_errors=wrong @ wrong.T, pair_sizes=mask @ mask.T)


def _check_oob(oob_mask, predictions, y):
    shapes = [np.shape(a) for a in (oob_mask, predictions, y)]
    if len(shapes[0]) != 2:
        raise ValueError(f"oob_mask must be [m_trees, n] (bool); got shape {shapes[0]}")
    if shapes[1] != shapes[0]:
        raise ValueError(f"predictions must have oob_mask's shape {shapes[0]} ([m_trees, n]); "
                         f"got {shapes[1]}")
    if shapes[2] != shapes[0][1:]:
        raise ValueError(f"y must be [n] = {shapes[0][1:]} (one label per column of oob_mask); "
                         f"got {shapes[2]}")
    if shapes[0][0] < 1:
        raise ValueError("oob_mask has no rows; it needs one per tree (m_trees >= 1)")
    if not is_traced(oob_mask) and np.asarray(oob_mask).dtype != bool:
        values = np.asarray(oob_mask)
        if not np.isin(values, (0, 1)).all():
            raise ValueError("oob_mask must be boolean (or 0/1): True where point i is out of "
                             "bag for tree h")
    return oob_mask, predictions, y


# ---------------------------------------------------------------------------------------------
# Weighted risks and the two bounds
def kl_uniform(rho) -> Array:
    """``KL(ρ‖π)`` for the uniform prior ``π = 1/m``: ``Σ_h ρ_h log ρ_h + log m`` (scalar), from
    ``rho`` ``[m]`` (a distribution)."""
    rho = jnp.asarray(rho)
    return jnp.sum(xlogy(rho, rho)) + jnp.log(rho.shape[-1])


def gibbs_risk(stats: OOBStats, rho) -> Array:
    """``L̂(ρ) = Σ_h ρ_h·L̂_h``, the ρ-weighted OOB Gibbs loss (scalar; ``rho`` ``[m]``)."""
    return jnp.dot(rho, stats.gibbs_losses)


def tandem_risk(stats: OOBStats, rho) -> Array:
    """``L̂(ρ²) = Σ_{h,h'} ρ_h ρ_h' L̂_{hh'}``, the ρ-weighted OOB tandem loss (scalar)."""
    return rho @ stats.tandem_losses @ rho


def _kl_bound(risk, kl, n, delta):
    """``kl⁻¹(risk, (kl + log(2√n/δ))/n)``; 1 when ``n = 0``."""
    n = jnp.asarray(n, jnp.result_type(risk))
    rhs = jnp.where(n > 0, (kl + jnp.log(2 * jnp.sqrt(n) / delta)) / jnp.maximum(n, 1), jnp.inf)
    return kl_inverse_upper(risk, rhs)


def first_order_bound(stats: OOBStats, rho, delta=0.05) -> Array:
    """``2·min(1, kl⁻¹(L̂(ρ), (KL(ρ‖π) + log(2√n/δ))/n))``, ``n = min_h n_h`` (scalar): a bound on
    the risk of the ρ-weighted majority vote, holding with probability ``≥ 1 − δ`` for all ρ.

    Args:
      stats: :class:`OOBStats` of ``m`` trees.
      rho: ``[m]`` weights (a distribution).
      delta: confidence in ``(0, 1)``.
    """
    return 2 * jnp.minimum(1.0, _kl_bound(gibbs_risk(stats, rho), kl_uniform(rho),
                                          stats.n_min, delta))


def tandem_bound(stats: OOBStats, rho, delta=0.05) -> Array:
    """``4·min(1/4, kl⁻¹(L̂(ρ²), (2·KL(ρ‖π) + log(2√n₂/δ))/n₂))``, ``n₂ = min_{h,h'} n_{hh'}``
    (scalar): the tandem bound on the risk of the ρ-weighted majority vote (probability
    ``≥ 1 − δ``, all ρ). Arguments as :func:`first_order_bound`."""
    return 4 * jnp.minimum(0.25, _kl_bound(tandem_risk(stats, rho), 2 * kl_uniform(rho),
                                           stats.n2_min, delta))


_BOUND_FUNCTIONS = {"first_order": first_order_bound, "tandem": tandem_bound}


# ---------------------------------------------------------------------------------------------
# Choosing ρ
def optimize_rho(stats: OOBStats, bound: str = "tandem", delta=0.05, steps: int = RHO_STEPS,
                 learning_rate: float = RHO_LEARNING_RATE) -> Array:
    """The weights ``ρ`` ``[m]`` that minimise one bound, by gradient descent in JAX.

    Adam on the logits of ``ρ = softmax(θ)``, starting from uniform (θ = 0), on the bound itself
    (the kl inverse is differentiated implicitly); the best iterate is returned, so the bound at
    the result is never above the bound at uniform weights. The bounds hold for every ρ at once,
    so a ρ chosen on the same OOB data keeps them valid.

    Args:
      stats: :class:`OOBStats`.
      bound: ``"first_order"`` or ``"tandem"``.
      delta: confidence in ``(0, 1)``.
      steps: Adam steps (static).
      learning_rate: Adam's step size on the logits.
    """
    if bound not in _BOUND_FUNCTIONS:
        raise ValueError(f"bound must be one of {BOUNDS}; got {bound!r}")
    if not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"steps must be a non-negative int; got {steps!r}")
    _check_delta(delta)
    return _optimize_rho(stats, delta, bound, int(steps), float(learning_rate))


@functools.partial(jax.jit, static_argnames=("bound", "steps", "learning_rate"))
def _optimize_rho(stats, delta, bound, steps, learning_rate):
    objective = lambda theta: _BOUND_FUNCTIONS[bound](stats, jax.nn.softmax(theta), delta)
    value_and_grad = jax.value_and_grad(objective)
    optimizer = optax.adam(learning_rate)
    theta = jnp.zeros(stats.sizes.shape, jnp.result_type(float))

    def step(carry, _):
        theta, state, best_value, best_theta = carry
        value, grad = value_and_grad(theta)
        better = value < best_value
        best_value = jnp.where(better, value, best_value)
        best_theta = jnp.where(better, theta, best_theta)
        updates, state = optimizer.update(grad, state)
        return (optax.apply_updates(theta, updates), state, best_value, best_theta), None

    init = (theta, optimizer.init(theta), jnp.asarray(jnp.inf, theta.dtype), theta)
    (theta, _, best_value, best_theta), _ = jax.lax.scan(step, init, None, length=steps)
    last = objective(theta)
    return jax.nn.softmax(jnp.where(last < best_value, theta, best_theta))


def _check_delta(delta):
    if not is_traced(delta) and not 0 < float(delta) < 1:
        raise ValueError(f"delta must be in (0, 1) (the bound holds with probability 1 - delta); "
                         f"got {delta!r}")


# ---------------------------------------------------------------------------------------------
# The certificate
@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["first_order", "tandem", "gibbs_risk", "tandem_risk", "kl",
                                "n_min", "n2_min", "rho", "delta"], meta_fields=[])
@dataclasses.dataclass(frozen=True)
class ForestCertificate:
    """Out-of-bag bounds on a forest's majority-vote risk (a pytree).

    Attributes:
      first_order: ``2·kl⁻¹`` bound on the Gibbs loss (:func:`first_order_bound`), may reach 2.
      tandem: ``4·kl⁻¹`` bound on the tandem loss (:func:`tandem_bound`), at most 1.
      gibbs_risk: ``L̂(ρ)``, the ρ-weighted OOB error rate of the trees.
      tandem_risk: ``L̂(ρ²)``, the ρ-weighted rate of OOB errors made by two trees together.
      kl: ``KL(ρ‖π)`` to the uniform prior, nats.
      n_min: smallest OOB sample of a tree (the first-order bound's n).
      n2_min: smallest OOB sample of a pair of trees (the tandem bound's n).
      rho: ``[m]`` the weights of the trees in the vote.
      delta: confidence; each bound holds with probability ``≥ 1 − δ``.
    """

    first_order: Array
    tandem: Array
    gibbs_risk: Array
    tandem_risk: Array
    kl: Array
    n_min: Array
    n2_min: Array
    rho: Array
    delta: Array


def certificate_at(stats: OOBStats, rho, delta=0.05) -> ForestCertificate:
    """The :class:`ForestCertificate` of weights ``rho`` ``[m]`` (pure; jit/vmap-able)."""
    rho = jnp.asarray(rho, jnp.result_type(float))
    return ForestCertificate(
        first_order=first_order_bound(stats, rho, delta), tandem=tandem_bound(stats, rho, delta),
        gibbs_risk=gibbs_risk(stats, rho), tandem_risk=tandem_risk(stats, rho),
        kl=kl_uniform(rho), n_min=stats.n_min, n2_min=stats.n2_min, rho=rho,
        delta=jnp.asarray(delta, rho.dtype))


_certificate_at = jax.jit(certificate_at)
WEIGHTS = ("uniform", "first_order", "tandem", "bound")


def forest_certificate(oob_mask, predictions, y, delta=0.05,
                       weights: Union[str, np.ndarray] = "uniform") -> ForestCertificate:
    """Both out-of-bag bounds on a forest's majority vote, for weights chosen as asked.

    Computed in float64 (``jax.enable_x64`` for this call); the fields are NumPy float64.

    Args:
      oob_mask: ``[m, n]`` bool, point i out of bag for tree h.
      predictions: ``[m, n]`` int, tree h's predicted label of training point i.
      y: ``[n]`` int labels.
      delta: confidence in ``(0, 1)``.
      weights: ``"uniform"``; ``"first_order"`` or ``"tandem"``: ρ minimising that bound
        (:func:`optimize_rho`); ``"bound"``: whichever of those two ρ gives the smaller of its
        two bounds; or an ``[m]`` array of non-negative weights (normalised here).

    Returns:
      :class:`ForestCertificate`.
    """
    _check_oob(oob_mask, predictions, y)
    _check_delta(delta)
    m = np.shape(oob_mask)[0]
    if isinstance(weights, str):
        if weights not in WEIGHTS:
            raise ValueError(f"weights must be one of {WEIGHTS} or an [m_trees] array; got "
                             f"{weights!r}")
    else:
        weights = np.asarray(weights, np.float64)
        if weights.shape != (m,) or not np.all(weights >= 0) or not weights.sum() > 0:
            raise ValueError(f"weights as an array must be [m_trees] = [{m}] non-negative with a "
                             f"positive sum; got shape {weights.shape}")
    with jax.enable_x64(True):
        stats = oob_statistics(np.asarray(oob_mask, bool), np.asarray(predictions),
                               np.asarray(y))
        if not isinstance(weights, str):
            rhos = [weights / weights.sum()]
        elif weights == "uniform":
            rhos = [np.full(m, 1.0 / m)]
        else:
            names = ("first_order", "tandem") if weights == "bound" else (weights,)
            rhos = [optimize_rho(stats, name, delta) for name in names]
        certificates = [jax.tree.map(np.asarray, _certificate_at(stats, rho, delta))
                        for rho in rhos]
    return min(certificates, key=lambda c: min(c.first_order, c.tandem))
