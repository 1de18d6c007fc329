"""One benchmark suite: the engine against NumPy and the memory-bandwidth floor, gradients, vmap,
grid cross-validation and routing against scikit-learn, a PAC-Bayes fit — all in this process.

    python -m experiments.bench [--quick] [--json PATH] [--depths 10 14 18 20]

It prints the device and versions first, then

* the engine table (issue 2), per depth D0 of a complete T0 (every node above the deepest level
  split, random potentials, float32): compile time of ``subtree_log_weights`` (first call minus a
  warm call); the up+down pass (a warm call); a plain NumPy level loop of the same recursion; the
  memory-bandwidth floor = bytes touched / copy bandwidth, with 13 bytes per node (read φ and
  ``internal``, write log β and log w), the bandwidth from a 256 MB copy timed in turn with the
  pass (NumPy on the CPU, a jitted op in device memory on an accelerator); the same pass through
  a single fixed-width ``lax.scan`` over levels (the compact layout at width 2^D0, D0·2^D0 work); a batch of 64
  potentials via ``vmap`` against a Python loop of 64 jitted calls; ``jax.grad`` of a smooth loss
  of the weights (Σ c·w) against the forward pass;
* the headline ratios (higher is better unless the name ends in ``_s``), also written by
  ``--json`` with the keys ``engine_vs_numpy_d18``, ``engine_vs_floor_d20`` (floor / ours),
  ``grad_over_forward_d18_s``, ``vmap64_vs_loop_d14`` (loop / vmap),
  ``grid_cv_vs_sklearn_letter`` (settings per second, ours / scikit-learn ``GridSearchCV`` over
  ``ccp_alpha``), ``route_vs_sklearn_predict_200k`` (sklearn ``predict`` time / our routing time),
  ``fit_pacbayes_spam_dyadic_s`` (warm fit, seconds) and ``device``.

Every time is the median of several calls after a warm-up; both sides of a ratio are measured in
this process. The engine table's ratios (×NumPy, floor/pass, loop/vmap, grad/pass) and routing's
are medians of per-pair ratios from calls taken in turn (:func:`paired_times`): this machine's
speed drifts by 2× within seconds, and separate medians taken a few seconds apart moved these
ratios by as much. ``--quick`` uses small sizes (a smoke test: its ratios are not the targets').
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxtree
from jaxtree.compact import CompactLayout
from jaxtree.engine import subtree_log_weights
from jaxtree.layout import CompleteLayout

BYTES_PER_NODE = 13  # read φ (4) and internal (1), write log β (4) and log w (4)


# -- timing ------------------------------------------------------------------------------------
def median_time(fn, repeats: int = 7) -> float:
    """Median wall-clock seconds of ``fn()`` (which must block) after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


PAIRS = 15  # pairs behind each of the engine table's ratios (slow spells last seconds here)


def paired_times(fn_a, fn_b, repeats: int = 7) -> tuple[float, float, float]:
    """``(median a, median b, median of b/a)`` from calls of ``fn_a`` and ``fn_b`` taken in turn
    (after one warm-up each), so that the ratio of each pair is measured under the same load —
    the shared machine's speed drifts by 2x within seconds."""
    fn_a()
    fn_b()
    pairs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn_a()
        middle = time.perf_counter()
        fn_b()
        pairs.append((middle - start, time.perf_counter() - middle))
    a, b = np.asarray(pairs).T
    return float(np.median(a)), float(np.median(b)), float(np.median(b / a))


def first_call(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def big_copy(nbytes: int = 2 ** 28):
    """``(copy, bytes_touched)``: a copy of ``nbytes``, far larger than the caches, in the memory
    the engine runs in, and the bytes it reads and writes (its time measures memory bandwidth):
    NumPy into a preallocated array on the CPU, one jitted elementwise op on an accelerator."""
    if jax.default_backend() == "cpu":
        a = np.ones(nbytes // 4, np.float32)
        b = np.empty_like(a)
        return (lambda: np.copyto(b, a)), 2 * a.nbytes
    x = jnp.ones(nbytes // 4, jnp.float32)
    step = jax.jit(lambda v: v + 1)
    return (lambda: step(x).block_until_ready()), 2 * x.nbytes


def header() -> str:
    import scipy
    import sklearn
    device = jax.devices()[0]
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    return (f"device: {device.platform} {device.device_kind} ({len(jax.devices())} device(s)); "
            f"{os.cpu_count()} CPUs, load average {load[0]:.1f}\n"
            f"python {platform.python_version()}, jax {jax.__version__}, "
            f"jaxlib {jax.lib.__version__}, numpy {np.__version__}, scipy {scipy.__version__}, "
            f"scikit-learn {sklearn.__version__}, jaxtree {jaxtree.__version__}")


# -- the engine table --------------------------------------------------------------------------
def complete_problem(depth: int, seed: int = 0):
    """Potentials and ``internal`` of a complete T0 of ``depth`` (float32, heap layout)."""
    n = 2 ** (depth + 1) - 1
    rng = np.random.default_rng(seed)
    phi = (3 * rng.normal(size=n)).astype(np.float32)
    internal = np.arange(n) < 2 ** depth - 1
    return phi, internal


def numpy_pass(phi: np.ndarray, internal: np.ndarray, depth: int) -> np.ndarray:
    """The same recursion as :func:`jaxtree.subtree_log_weights`, one NumPy step per level."""
    level = [slice(2 ** l - 1, 2 ** (l + 1) - 1) for l in range(depth + 1)]
    beta = phi.copy()
    for l in reversed(range(depth)):
        through = beta[level[l + 1]].reshape(-1, 2).sum(axis=1)
        beta[level[l]] = np.where(internal[level[l]], np.logaddexp(phi[level[l]], through),
                                  phi[level[l]])
    alpha = np.zeros_like(phi)
    for l in range(depth):
        swapped = beta[level[l + 1]].reshape(-1, 2)[:, ::-1].reshape(-1)
        alpha[level[l + 1]] = np.repeat(alpha[level[l]], 2) + swapped
    return phi + alpha - beta[0]


def scan_layout(depth: int) -> CompactLayout:
    """The complete tree of ``depth`` in the compact layout: one ``lax.scan`` at width 2^D0."""
    parents = [np.zeros(1, np.int64)] + [np.arange(2 ** l) // 2 for l in range(1, depth + 1)]
    internal = [np.full(2 ** l, l < depth) for l in range(depth + 1)]
    return CompactLayout.from_levels(parents, internal)


def to_compact(x: np.ndarray, layout: CompactLayout, depth: int, fill) -> np.ndarray:
    out = np.full((depth + 1, layout.width), fill, x.dtype)
    for l in range(depth + 1):
        out[l, :2 ** l] = x[2 ** l - 1: 2 ** (l + 1) - 1]
    return out.reshape(-1)


def engine_row(depth: int, copy, batch: int = 64, with_scan: bool = True) -> dict:
    phi_np, internal_np = complete_problem(depth)
    phi, internal = jnp.asarray(phi_np), jnp.asarray(internal_np)
    layout = CompleteLayout(depth)
    forward = jax.jit(lambda a, i: subtree_log_weights(a, i, layout=layout))
    compile_s = first_call(lambda: forward(phi, internal).block_until_ready())
    pass_s, numpy_s, numpy_ratio = paired_times(
        lambda: forward(phi, internal).block_until_ready(),
        lambda: numpy_pass(phi_np, internal_np, depth), PAIRS)
    compile_s -= pass_s
    # the floor, from a big copy timed in turn with the pass: floor / pass = bytes per node ·
    # nodes / bytes copied · (copy time / pass time), a ratio of paired calls
    copy_fn, copied = copy
    _, copy_s, copy_over_pass = paired_times(lambda: forward(phi, internal).block_until_ready(),
                                             copy_fn, PAIRS)
    node_bytes = BYTES_PER_NODE * phi_np.size
    ours = np.asarray(forward(phi, internal))
    with np.errstate(invalid="ignore"):
        reference = numpy_pass(phi_np.astype(np.float64), internal_np, depth)
    row = dict(depth=depth, compile_s=compile_s, pass_s=pass_s, numpy_s=numpy_s,
               numpy_over_pass=numpy_ratio, floor_s=node_bytes * copy_s / copied,
               floor_over_pass=node_bytes / copied * copy_over_pass,
               max_abs_diff_vs_f64=float(np.max(np.abs(ours - reference))))

    if with_scan:
        compact = scan_layout(depth)
        phi_c = jnp.asarray(to_compact(phi_np, compact, depth, 0.0))
        internal_c = jnp.asarray(to_compact(internal_np, compact, depth, False))
        scan = jax.jit(lambda a, i: subtree_log_weights(a, i, layout=compact))
        row["scan_compile_s"] = first_call(lambda: scan(phi_c, internal_c).block_until_ready())
        row["scan_pass_s"] = median_time(lambda: scan(phi_c, internal_c).block_until_ready(), 3)
        row["scan_compile_s"] -= row["scan_pass_s"]

    if batch:
        phis = jnp.asarray(phi_np[None] + np.arange(batch, dtype=np.float32)[:, None] / batch)
        mapped = jax.jit(jax.vmap(lambda a: subtree_log_weights(a, internal, layout=layout)))
        rows = [phis[k] for k in range(batch)]
        row["vmap_s"], row["loop_s"], row["loop_over_vmap"] = paired_times(
            lambda: mapped(phis).block_until_ready(),
            lambda: jax.block_until_ready([forward(a, internal) for a in rows]), PAIRS)

    coef = jnp.asarray(np.random.default_rng(1).normal(size=phi_np.size).astype(np.float32))

    def loss(a):
        return jnp.sum(coef * jnp.exp(subtree_log_weights(a, internal, layout=layout)))

    grad = jax.jit(jax.grad(loss))
    grad(phi).block_until_ready()
    _, row["grad_s"], row["grad_over_pass"] = paired_times(
        lambda: forward(phi, internal).block_until_ready(),
        lambda: grad(phi).block_until_ready(), PAIRS)
    return row


def print_engine_table(rows: list[dict]) -> None:
    print("\nEngine (subtree_log_weights, complete T0, float32; medians; ms unless noted)")
    print(f"{'D0':>3} {'nodes':>9} {'compile s':>9} {'pass':>8} {'NumPy':>8} {'xNumPy':>7} "
          f"{'floor':>7} {'floor/pass':>10} {'scan':>8} {'scan cmp s':>10} {'vmap64':>8} "
          f"{'loop64':>8} {'loop/vmap':>9} {'grad':>8} {'grad/pass':>9} {'|err| vs f64':>12}")
    for r in rows:
        ms = lambda key: f"{r[key] * 1e3:8.2f}" if key in r else f"{'-':>8}"  # noqa: E731
        vmap_ratio = f"{r['loop_over_vmap']:9.2f}" if "vmap_s" in r else f"{'-':>9}"
        scan_compile = f"{r['scan_compile_s']:10.2f}" if "scan_compile_s" in r else f"{'-':>10}"
        print(f"{r['depth']:>3} {2 ** (r['depth'] + 1) - 1:>9} {r['compile_s']:9.2f} "
              f"{ms('pass_s')} {ms('numpy_s')} {r['numpy_over_pass']:7.2f} "
              f"{r['floor_s'] * 1e3:7.2f} {r['floor_over_pass']:10.2f} {ms('scan_pass_s')} "
              f"{scan_compile} {ms('vmap_s')} {ms('loop_s')} {vmap_ratio} {ms('grad_s')} "
              f"{r['grad_over_pass']:9.2f} {r['max_abs_diff_vs_f64']:12.2e}")


# -- methods against scikit-learn ----------------------------------------------------------------
def grid_cv_vs_sklearn(quick: bool) -> dict:
    """Settings per second: the paper's 200-setting 2-fold CV (jaxtree.select) on a KD T0 of
    letter, against GridSearchCV(DecisionTreeClassifier, 20 ccp_alpha values, cv=2)."""
    from sklearn.model_selection import GridSearchCV
    from sklearn.tree import DecisionTreeClassifier

    from experiments.example import load_csv
    from jaxtree import select
    from jaxtree.estimators import default_depth

    X, y = load_csv("letter")
    n = 3000 if quick else 18000
    order = np.random.default_rng(0).permutation(len(y))[:n]
    X, y = X[order], y[order]
    labels = int(y.max()) + 1

    def ours():
        tree = jaxtree.kd_tree(X, max_depth=default_depth("kd", *X.shape), y=y, split="spread")
        folds = select.prepare_folds(tree, X, jnp.asarray(y), labels,
                                     select.fold_masks(len(y), 2, seed=0))
        result = jax.block_until_ready(select.paper_search(tree, folds, select.pacbayes_votes))
        return sum(len(e) for e in result.errors)

    first = first_call(ours)
    settings = ours()
    ours_s = median_time(ours, 1 if quick else 2)
    alphas = np.r_[0.0, np.geomspace(1e-6, 1e-2, 19)]
    sk = GridSearchCV(DecisionTreeClassifier(random_state=0), {"ccp_alpha": list(alphas)}, cv=2,
                      n_jobs=1, refit=False)
    sk_s = first_call(lambda: sk.fit(X, y))
    return dict(n=n, settings=settings, ours_s=ours_s, ours_first_s=first,
                sklearn_settings=len(alphas), sklearn_s=sk_s,
                ratio=(settings / ours_s) / (len(alphas) / sk_s))


def route_vs_sklearn(quick: bool) -> dict:
    """Routing 200k points to their leaves (jaxtree.leaf_of on a KD tree of depth 17) against
    scikit-learn ``predict`` of a tree grown on the same 200k points."""
    from sklearn.tree import DecisionTreeClassifier
    n = 20000 if quick else 200000
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 8)).astype(np.float32)
    y = (X[:, 0] + 0.5 * X[:, 1] ** 2 + 0.3 * rng.normal(size=n) > 0.5).astype(np.int64)
    tree = jaxtree.kd_tree(X, max_depth=int(np.ceil(np.log2(n))) - 1, y=y)
    Xj = jnp.asarray(X)
    sk = DecisionTreeClassifier(random_state=0).fit(X, y)
    ours_s, sk_s, ratio = paired_times(lambda: jaxtree.leaf_of(tree, Xj).block_until_ready(),
                                       lambda: sk.predict(X))
    return dict(n=n, depth=tree.depth, sklearn_depth=int(sk.get_depth()), ours_s=ours_s,
                sklearn_s=sk_s, ratio=ratio)


def fit_pacbayes_spam_dyadic() -> dict:
    """Fit time of PACBayesTreeClassifier(partition="dyadic") on 2601 spam points (λ's given,
    no tuning): first call (compiles) and the median of warm calls."""
    from experiments.example import load_csv
    X, y = load_csv("spam")
    order = np.random.default_rng(0).permutation(len(y))[:2601]
    X, y = X[order], y[order]

    def fit():
        model = jaxtree.PACBayesTreeClassifier(partition="dyadic", split="spread", lam1=7.4,
                                               lam2=1.0, tune=None)
        model.fit(X, y)
        jax.block_until_ready(model.node_log_weights_)
        return model

    first = first_call(fit)
    model = fit()
    return dict(first_s=first, warm_s=median_time(fit, 3), depth=model.tree_.depth,
                layout=type(model.tree_.layout).__name__)


# -- main ------------------------------------------------------------------------------------------
def run(quick: bool = False, depths=None) -> dict:
    """Run every benchmark, print the tables, return the headline ratios and raw rows."""
    print(header(), flush=True)
    depths = depths or ([8, 10, 12, 14] if quick else [10, 14, 18, 20])
    copy = big_copy(2 ** 24 if quick else 2 ** 28)
    print(f"copy bandwidth ({jax.default_backend()}, read+write): "
          f"{copy[1] / median_time(copy[0], 5) / 1e9:.1f} GB/s")
    rows = []
    for depth in depths:
        rows.append(engine_row(depth, copy, batch=64 if depth <= 18 else 0,
                               with_scan=depth <= 18))
        print(f"  D0={depth} done", flush=True)
    print_engine_table(rows)
    by_depth = {r["depth"]: r for r in rows}

    def pick(preferred, fallback=max):
        return by_depth[preferred] if preferred in by_depth else by_depth[fallback(by_depth)]

    cv = grid_cv_vs_sklearn(quick)
    routing = route_vs_sklearn(quick)
    fit = fit_pacbayes_spam_dyadic()
    d18, d20, d14 = pick(18), pick(20), pick(14, lambda d: max(k for k in d if "vmap_s" in d[k]))
    device = jax.devices()[0]
    summary = {
        "engine_vs_numpy_d18": d18["numpy_over_pass"],
        "engine_vs_floor_d20": d20["floor_over_pass"],
        "grad_over_forward_d18_s": d18["grad_over_pass"],
        "vmap64_vs_loop_d14": d14["loop_over_vmap"],
        "grid_cv_vs_sklearn_letter": cv["ratio"],
        "route_vs_sklearn_predict_200k": routing["ratio"],
        "fit_pacbayes_spam_dyadic_s": fit["warm_s"],
        "device": f"{device.platform} {device.device_kind}",
    }
    print(f"\nGrid CV on letter ({cv['n']} points, 2 folds): {cv['settings']} settings in "
          f"{cv['ours_s']:.2f} s (first call {cv['ours_first_s']:.2f} s) vs scikit-learn "
          f"GridSearchCV {cv['sklearn_settings']} ccp_alpha in {cv['sklearn_s']:.2f} s")
    print(f"Routing {routing['n']} points: ours {routing['ours_s'] * 1e3:.1f} ms (depth "
          f"{routing['depth']}), scikit-learn predict {routing['sklearn_s'] * 1e3:.1f} ms "
          f"(depth {routing['sklearn_depth']})")
    print(f"PAC-Bayes dyadic fit on spam (2601 points, depth {fit['depth']}, {fit['layout']}): "
          f"warm {fit['warm_s']:.2f} s, first call {fit['first_s']:.2f} s")
    label = " (--quick: sizes below the targets')" if quick else ""
    print(f"\nHeadline ratios{label} (higher is better unless the name ends in _s)")
    for key, value in summary.items():
        print(f"  {key:<32} {value if isinstance(value, str) else f'{value:.3g}'}")
    return dict(summary=summary, engine=rows, grid_cv=cv, routing=routing, fit=fit)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument("--json", help="write the headline ratios (and raw rows) to this path")
    parser.add_argument("--depths", type=int, nargs="+", help="engine table depths")
    args = parser.parse_args(argv)
    result = run(args.quick, args.depths)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**result["summary"], "details": {k: v for k, v in result.items()
                                                        if k != "summary"}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
