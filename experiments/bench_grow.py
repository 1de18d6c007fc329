"""The ``grow`` section of :mod:`experiments.bench_fit`: T0 grown by JAX against the NumPy
builders, both in this process.

    python -m experiments.bench_fit --sections grow [--sizes 10000 100000] [--large]
                                    [--repeats 3] [--out PATH]

**grow**: growing T0 on ``n`` rows × 20 features (standard normal, float32; three classes from
two features plus 20 % label noise), the jitted :func:`jaxtree.grow_tree` (warm: its compile is
timed once and reported apart) against the NumPy builders (:func:`jaxtree.dyadic_tree`,
:func:`jaxtree.kd_tree`, :func:`jaxtree.cart_tree` with ``bins=32``), for ``max_depth=10``,
``min_split=2``, labels given (pure nodes stop) and ``width=1024`` (no node is capped: checked,
and the two trees are checked to be the same); dyadic and KD trees with coordinates cycled (the
paper's rule) and on the widest-spread coordinate (the estimators' default). ``n`` is 10⁴ and
10⁵, and 10⁶ with ``--large`` (minutes on a shared CPU). Reported: the median of ``--repeats``
runs of each and the ratio JAX / NumPy (below 1: JAX faster).

Times are wall-clock seconds on whatever else the machine runs; both sides are timed in turn, so
the ratios are what to read. Results: ``experiments/results/bench_fit.md`` (this section's part).
"""

from __future__ import annotations

import argparse
import pathlib
import platform
import statistics
import time

import jax
import numpy as np

import jaxtree
from jaxtree.compact import pad_compact

DIMS, DEPTH, WIDTH, BINS = 20, 10, 1024, 32
OUT = pathlib.Path(__file__).parent / "results" / "bench_fit.md"


def data(n: int, seed: int = 0):
    """``(X [n, 20] float32, y [n])``: three classes from two features, 20 % flipped."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, DIMS)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5)
    flip = rng.random(n) < 0.2
    return X, np.where(flip, rng.integers(0, 3, size=n), y)


TREES = (("dyadic", "cycle"), ("dyadic", "spread"), ("kd", "cycle"), ("kd", "spread"),
         ("cart", "cycle"))          # (partition, split); CART picks its own features


def numpy_builder(partition: str, split: str = "cycle"):
    if partition == "cart":
        return lambda X, y: jaxtree.cart_tree(X, y, max_depth=DEPTH, bins=BINS, layout="compact")
    build = jaxtree.kd_tree if partition == "kd" else jaxtree.dyadic_tree
    return lambda X, y: build(X, DEPTH, y=y, split=split, layout="compact")


def timed(fn, repeats: int) -> float:
    """Median wall time of ``repeats`` calls (results blocked on)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def grow_row(partition: str, n: int, repeats: int, split: str = "cycle") -> dict:
    X, y = data(n)
    weight = np.ones(n, np.float32)
    config = jaxtree.GrowConfig(partition=partition, max_depth=DEPTH, width=WIDTH, num_classes=3,
                                bins=BINS, split=split)
    Xd, yd, wd = jax.device_put(X), jax.device_put(y), jax.device_put(weight)
    start = time.perf_counter()
    tree, info = jax.block_until_ready(jaxtree.grow_tree(Xd, yd, wd, config))
    compile_s = time.perf_counter() - start
    build = numpy_builder(partition, split)
    reference = build(X, y)
    same = (int(info.capped) == 0 and np.array_equal(
        np.asarray(tree.internal),
        np.asarray(pad_compact(reference, DEPTH + 1, WIDTH).internal)))
    jax_s = timed(lambda: jaxtree.grow_tree(Xd, yd, wd, config), repeats)
    numpy_s = timed(lambda: build(X, y), repeats)
    name = partition if partition == "cart" else f"{partition} ({split})"
    return {"partition": name, "n": n, "jax": jax_s, "numpy": numpy_s,
            "ratio": jax_s / numpy_s, "first_call": compile_s, "same": same,
            "nodes": int(np.asarray(tree.internal).sum())}


def grow_section(sizes, repeats: int) -> str:
    lines = ["## grow", "",
             f"T0 on n × {DIMS} features, max_depth={DEPTH}, width={WIDTH}, bins={BINS} (CART), "
             f"median of {repeats}; JAX warm (first call, with its compile, apart). "
             f"`{platform.processor() or platform.machine()}`, jax {jax.__version__}, "
             f"{jax.devices()[0].platform}.", "",
             "| partition | n | JAX s | NumPy s | JAX / NumPy | JAX first call s | split nodes "
             "| same tree |", "|---|---|---|---|---|---|---|---|"]
    for n in sizes:
        for partition, split in TREES:
            row = grow_row(partition, n, repeats, split)
            line = (f"| {row['partition']} | {n:,} | {row['jax']:.3f} | {row['numpy']:.3f} | "
                    f"{row['ratio']:.2f} | {row['first_call']:.2f} | {row['nodes']} | "
                    f"{row['same']} |")
            print(line, flush=True)
            lines.append(line)
    return "\n".join(lines) + "\n"


def write_section(path: pathlib.Path, name: str, text: str) -> None:
    """Replace (or append) the ``## name`` section of the results file."""
    fresh = "# bench_fit\n\n`python -m experiments.bench_fit`\n"
    old = path.read_text() if path.exists() else fresh
    head, marker, rest = old.partition(f"## {name}\n")
    tail = rest[rest.find("\n## "):] if marker and "\n## " in rest else ""
    rest_text = "\n" + tail.lstrip("\n") if tail else ""
    path.write_text(head.rstrip("\n") + "\n\n" + text + rest_text)
