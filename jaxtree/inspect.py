"""What a fitted tree model learned: feature importances, a text dump and a picture of T0
(docs/theory/importance.md).

Every estimator of jaxtree predicts with node weights ``w(A)``: the probability that the
model's pruning of T0 stops at A (a PAC-Bayes or HS vote: the posterior's, in (0, 1); a pruning:
1 at its leaves, 0 elsewhere; a plain T0: 1 at T0's leaves). The probability that the model
*uses* the split of an internal node A — that the random pruning contains A and does not stop
there — is ``P(A splits) = 1 − Σ_{B on the root path of A, A included} w(B)``: the pruning stops
at most once on a root-to-leaf path, and it reaches A iff it stops at none of A's strict
ancestors. From it:

* :func:`feature_importances` — ``Σ_A P(A splits)·ΔI(A)`` per feature, ``ΔI(A)`` the impurity
  decrease of the split (weighted Gini for classifiers, the sum of squared deviations for
  regressors), normalised to sum to 1;
* :func:`export_text` and :func:`plot_tree` — T0 with each node's split, counts (or mean) and
  ``w(A)``, the probability of stopping there (the colour of the picture).
"""

from __future__ import annotations

from typing import Optional, Sequence

import jax.numpy as jnp
import numpy as np
from sklearn.utils.validation import check_is_fitted

from jaxtree.engine import child_values


def node_weights(model) -> np.ndarray:
    """``[nodes]`` float64 ``w(A)`` of a fitted model: ``exp(node_log_weights_)``, or a pruning's
    ``leaf_mask_`` (1 at its leaves)."""
    check_is_fitted(model)
    if hasattr(model, "leaf_mask_"):
        return np.asarray(model.leaf_mask_, np.float64)
    if hasattr(model, "node_log_weights_"):
        return np.exp(np.asarray(model.node_log_weights_, np.float64))
    raise ValueError(f"model must be a fitted jaxtree estimator with node weights "
                     f"(node_log_weights_ or leaf_mask_); got {type(model).__name__}")


def split_probability(model) -> np.ndarray:
    """``[nodes]`` ``P(A splits)`` under the fitted model (module docstring): 0 at T0's leaves
    and padding; for a pruning, 1 at its internal nodes and 0 elsewhere."""
    tree = model.tree_
    weight = node_weights(model)
    # inclusive root-path sum: path_sum leaves the root's own term out
    reached = weight[0] + np.asarray(tree.layout.path_sum(jnp.asarray(weight)), np.float64)
    return np.where(np.asarray(tree.internal), np.clip(1.0 - reached, 0.0, 1.0), 0.0)


def node_impurity(model) -> np.ndarray:
    """``[nodes]`` ``N_A·I(A)`` of the training sample: the weighted Gini impurity
    ``N_A − Σ_l N_{A,l}²/N_A`` of a classifier's counts, or a regressor's sum of squared
    deviations from the node mean (``stats_.sse``)."""
    stats = model.stats_
    if hasattr(stats, "sse"):
        return np.asarray(stats.sse, np.float64)
    counts = np.asarray(stats.counts, np.float64)
    total = counts.sum(axis=1)
    return total - np.square(counts).sum(axis=1) / np.maximum(total, 1e-300)


def impurity_decrease(model) -> np.ndarray:
    """``[nodes]`` ``ΔI(A) = N_A·I(A) − N_L·I(L) − N_R·I(R)`` at T0's internal nodes (0
    elsewhere; clipped at 0 against rounding)."""
    tree = model.tree_
    impurity = node_impurity(model)
    left, right = (np.asarray(v, np.float64) for v in child_values(
        jnp.asarray(impurity), tree.layout))
    decrease = np.maximum(impurity - left - right, 0.0)
    return np.where(np.asarray(tree.internal), decrease, 0.0)


def feature_importances(model) -> np.ndarray:
    """``[D]`` importance of each feature for a fitted jaxtree estimator.

    ``imp_d ∝ Σ_{A internal, feature(A) = d} P(A splits)·ΔI(A)`` (module docstring;
    docs/theory/importance.md), normalised to sum to 1; all zeros when the model never splits.
    An oblique split shares its ``ΔI(A)`` among the features in proportion to ``|coef[A, d]|``.

    Args:
      model: a fitted estimator of jaxtree (classifier or regressor).

    Returns:
      ``[n_features_in_]`` float64, non-negative, summing to 1 (or all 0).

    Example:
        Only feature 1 carries the label; a pruning uses its splits only:

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.c_[np.zeros(8), np.arange(8.0)]
        >>> y = np.array([0, 0, 0, 0, 1, 1, 1, 1])
        >>> model = jaxtree.PrunedTreeClassifier(method="c1", lam=1.0, max_depth=2).fit(X, y)
        >>> jaxtree.feature_importances(model).tolist()
        [0.0, 1.0]
    """
    tree = model.tree_
    used = split_probability(model) * impurity_decrease(model)          # [nodes]
    dims = int(model.n_features_in_)
    if tree.coef is not None:
        share = np.abs(np.asarray(tree.coef, np.float64))
        share = share / np.maximum(share.sum(axis=1, keepdims=True), 1e-300)
        importance = (used[:, None] * share).sum(axis=0)
    else:
        importance = np.bincount(np.asarray(tree.feature), weights=used, minlength=dims)
    total = importance.sum()
    return importance / total if total > 0 else np.zeros(dims)


# -- the tree as text and as a picture --------------------------------------------------------
def _feature_names(model, feature_names) -> list[str]:
    dims = int(model.n_features_in_)
    if feature_names is None:
        names = getattr(model, "feature_names_in_", None)
        return [str(n) for n in names] if names is not None else [f"x{d}" for d in range(dims)]
    names = [str(n) for n in feature_names]
    if len(names) != dims:
        raise ValueError(f"feature_names must have one name per feature ({dims}); got "
                         f"{len(names)}")
    return names


def _check_depth(max_depth):
    if max_depth is not None and (not isinstance(max_depth, (int, np.integer))
                                  or isinstance(max_depth, bool) or max_depth < 0):
        raise ValueError(f"max_depth must be None or an integer >= 0; got {max_depth!r}")


def _split_text(model, node: int, names: Sequence[str], decimals: int) -> tuple[str, str]:
    """``("<name> <= t", "<name> >  t")`` of an internal node, the threshold in the units of
    ``X`` (the builder's scaling undone), ``" or NaN"`` on the side missing values take where
    the tree routes them; an oblique node's hyperplane in scaled units."""
    tree = model.tree_
    t = float(tree.threshold[node])
    if tree.coef is not None:
        coef = np.asarray(tree.coef[node], np.float64)
        terms = " + ".join(f"{c:.{decimals}f}*z({names[d]})" for d, c in enumerate(coef) if c)
        return f"{terms} <  {t:.{decimals}f}", f"{terms} >= {t:.{decimals}f}"
    d = int(tree.feature[node])
    value = t / float(tree.inv_scale[d]) + float(tree.shift[d])
    left, right = f"{names[d]} <= {value:.{decimals}f}", f"{names[d]} >  {value:.{decimals}f}"
    if tree.routes_missing:                 # the side that a missing value (NaN) takes
        if bool(tree.missing_right[node]):
            return left, right + " or NaN"
        return left + " or NaN", right
    return left, right


def _node_summary(model, node: int, weight: float, decimals: int) -> list[str]:
    """``["n=…", "<counts or mean>", "P(stop)=w(A)"]`` of one node."""
    stats = model.stats_
    if hasattr(model, "node_values_"):
        total = float(stats.total[node])
        value = f"mean={float(model.node_values_[node]):.{decimals}f}"
    else:
        counts = np.asarray(stats.counts[node], np.float64)
        total = counts.sum()
        value = f"counts=[{', '.join(f'{c:g}' for c in counts.round(decimals))}]"
    return [f"n={total:g}", value, f"P(stop)={weight:.{decimals}f}"]


def export_text(model, feature_names: Optional[Sequence[str]] = None, max_depth=None,
                decimals: int = 3) -> str:
    """T0 of a fitted estimator as text, one line per node (scikit-learn's ``export_text``
    layout): the root's summary, then each child as ``|--- <split condition>`` and its summary.

    The summary is ``n`` (training points, weighted), the class counts (in the order of
    ``classes_``) or the mean target, and ``P(stop)``, the model's weight ``w(A)`` on A: the
    posterior probability of stopping at A (a pruning: 1 at its leaves, 0 elsewhere).

    Args:
      model: a fitted jaxtree estimator.
      feature_names: ``[D]`` names (default ``feature_names_in_``, else ``x0, x1, ...``).
      max_depth: None (all of T0) or the deepest level shown; deeper branches are marked
        ``... (truncated)``.
      decimals: digits of thresholds, means and probabilities.

    Returns:
      the text (lines joined by newlines, a final newline).

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.arange(8.0)[:, None]
        >>> y = np.array([0, 0, 1, 0, 1, 1, 1, 1])
        >>> model = jaxtree.PACBayesTreeClassifier(partition="cart", min_split=2, lam1=4.0,
        ...                                        lam2=1.0).fit(X, y)
        >>> print(jaxtree.export_text(model, feature_names=["t"], max_depth=1), end="")
        n=8, counts=[3, 5], P(stop)=0.001
        |--- t <= 3.000  [n=4, counts=[3, 1], P(stop)=0.338]
        |   |--- ... (truncated)
        |--- t >  3.000 or NaN  [n=4, counts=[0, 4], P(stop)=0.999]
    """
    names = _feature_names(model, feature_names)
    _check_depth(max_depth)
    tree = model.tree_
    internal = np.asarray(tree.internal)
    left = np.asarray(tree.left_child)
    weight = node_weights(model)
    lines = [", ".join(_node_summary(model, 0, weight[0], decimals))]

    def walk(node, depth):
        if not internal[node]:
            return
        indent = "|   " * depth
        if max_depth is not None and depth >= max_depth:
            lines.append(f"{indent}|--- ... (truncated)")
            return
        for child, condition in zip((left[node], left[node] + 1),
                                    _split_text(model, node, names, decimals)):
            lines.append(f"{indent}|--- {condition}  "
                         f"[{', '.join(_node_summary(model, child, weight[child], decimals))}]")
            walk(child, depth + 1)

    walk(0, 0)
    return "\n".join(lines) + "\n"


def _positions(internal, left, max_depth) -> dict:
    """``{node: (x, depth)}`` of the shown nodes: leaves at consecutive x, a parent above the
    middle of its children."""
    positions, next_x = {}, [0.0]

    def place(node, depth):
        if internal[node] and (max_depth is None or depth < max_depth):
            xs = [place(child, depth + 1) for child in (left[node], left[node] + 1)]
            x = sum(xs) / 2
        else:
            x, next_x[0] = next_x[0], next_x[0] + 1
        positions[node] = (x, depth)
        return x

    place(0, 0)
    return positions


def plot_tree(model, ax=None, feature_names: Optional[Sequence[str]] = None, max_depth=None,
              decimals: int = 2, fontsize: Optional[float] = None, cmap: str = "viridis"):
    """Draw T0 of a fitted estimator with matplotlib: a box per node holding its split, ``n``,
    its counts (or mean) and ``P(stop)`` (:func:`export_text`), filled by the colour of
    ``P(stop)`` under ``cmap`` (a colour bar shows the scale).

    Args:
      model: a fitted jaxtree estimator.
      ax: a matplotlib ``Axes`` (default: the current one, ``plt.gca()``).
      feature_names, max_depth, decimals: as in :func:`export_text`.
      fontsize: the boxes' font size (default matplotlib's).
      cmap: the colour map of ``P(stop)`` over [0, 1].

    Returns:
      the list of the boxes' ``matplotlib.text.Annotation`` artists, one per shown node.

    Example:
        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> import matplotlib.pyplot as plt
        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.arange(8.0)[:, None]
        >>> y = np.array([0, 0, 1, 0, 1, 1, 1, 1])
        >>> model = jaxtree.PACBayesTreeClassifier(partition="cart", min_split=2, lam1=4.0,
        ...                                        lam2=1.0).fit(X, y)
        >>> fig, ax = plt.subplots(figsize=(6, 4))
        >>> len(jaxtree.plot_tree(model, ax=ax))    # T0's seven nodes
        7
        >>> plt.close(fig)
    """
    import matplotlib.pyplot as plt
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    names = _feature_names(model, feature_names)
    _check_depth(max_depth)
    ax = plt.gca() if ax is None else ax
    tree = model.tree_
    internal = np.asarray(tree.internal)
    left = np.asarray(tree.left_child)
    weight = node_weights(model)
    positions = _positions(internal, left, max_depth)
    colours = plt.get_cmap(cmap)
    width = max(x for x, _ in positions.values()) + 1
    depth = max(d for _, d in positions.values()) + 1
    artists = []
    for node, (x, d) in positions.items():
        label = "\n".join(_node_summary(model, node, weight[node], decimals))
        if internal[node]:
            split = _split_text(model, node, names, decimals)[0]
            label = split + ("\n" + label if max_depth is None or d < max_depth
                             else "\n(truncated)\n" + label)
        xy = ((x + 0.5) / width, 1 - (d + 0.5) / depth)
        for child in ((left[node], left[node] + 1) if node in positions and internal[node]
                      else ()):
            if child in positions:
                cx, cd = positions[child]
                ax.plot([xy[0], (cx + 0.5) / width], [xy[1], 1 - (cd + 0.5) / depth],
                        color="0.5", linewidth=0.8, zorder=1)
        face = colours(float(np.clip(weight[node], 0, 1)))
        text_colour = "white" if sum(face[:3]) < 1.5 else "black"
        artists.append(ax.annotate(label, xy, ha="center", va="center", fontsize=fontsize,
                                   color=text_colour, zorder=2,
                                   bbox=dict(boxstyle="round", facecolor=face,
                                             edgecolor="0.3")))
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_axis_off()
    ax.figure.colorbar(ScalarMappable(Normalize(0, 1), colours), ax=ax,
                       label="P(stop)")
    return artists
