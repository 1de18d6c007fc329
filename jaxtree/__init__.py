"""jaxtree: learning with partition trees in JAX — PAC-Bayes voting over all prunings, and pruning.

The functional core (pure functions on arrays and pytrees; jit / vmap / grad friendly)::

    tree  = jaxtree.kd_tree(X, max_depth=12, y=y)                 # or dyadic_tree
    stats = jaxtree.node_stats(tree, X, y, num_classes)            # counts [nodes, L]
    log_w = jaxtree.pacbayes_log_weights(tree, stats, lam1, lam2)  # [nodes]
    node_proba = jaxtree.class_frequencies(tree, stats.counts, 0.5)   # [nodes, L]
    proba = jaxtree.posterior_predictive(tree, node_proba, log_w, X_test)   # [n_test, L]

and scikit-learn-style estimators over it (:class:`PACBayesTreeClassifier`). Any other potentials
go through ``jaxtree.subtree_log_weights(phi, tree.internal, layout=tree.layout)``;
``jaxtree.pruning_process`` gives the same distribution as a branching process.
"""

from jaxtree.build import dyadic_tree, kd_tree
from jaxtree.cart import cart_tree
from jaxtree.grow import GrowConfig, GrowInfo, grow_tree
from jaxtree.certificate import (Certificate, pacbayes_certificate, pacbayes_theory_certificate,
                                 prunings_kl, tune_by_bound)
from jaxtree.compact import CompactLayout
from jaxtree.engine import (PruningProcess, best_pruning, best_pruning_and_cost, child_values,
                            local_offsets, log_partition, log_weights_from_offsets,
                            pruning_process, pruning_process_from_offsets, subtree_log_weights,
                            tree_membership)
from jaxtree.fitting import FittedTree, fit, predict_proba
from jaxtree.estimators import ObliqueTreeClassifier, PACBayesTreeClassifier
from jaxtree.estimators import HSVoteClassifier, PrunedTreeClassifier
from jaxtree.inspect import export_text, feature_importances, plot_tree
from jaxtree.forest import PACBayesForestClassifier
from jaxtree.hsvote import hs_log_weights, hs_node_estimates, hs_potentials, hs_vote
from jaxtree.layout import CompleteLayout
from jaxtree.prune import (c1_leaf_cost, holdout_errors, km_pruning, local_test_pruning,
                           min_error_per_size, optimistic_pruning, pruning_of_size, rep_pruning,
                           sn_leaf_cost, srm_select)
from jaxtree.oblique import (fat, margin_bound, node_margins, oblique_tree, tree_margin_bound,
                             twoing)
from jaxtree.persist import load
from jaxtree.regression import PACBayesTreeRegressor, PrunedTreeRegressor
from jaxtree.pacbayes import (pacbayes_authors_log_weights, pacbayes_authors_offsets,
                              pacbayes_authors_potentials, pacbayes_log_weights,
                              pacbayes_offsets, pacbayes_potentials,
                              pacbayes_theory_log_weights, pacbayes_theory_offsets,
                              pacbayes_theory_potentials, posterior_predictive,
                              scores_from_paths, vote)
from jaxtree.select import (batch_fit_scores, batch_paper_search, fold_masks, gradient_tune,
                            grid_errors, paper_search, prepare_folds, stack_problems, tune)
from jaxtree.shapes import enable_compilation_cache
from jaxtree.stats import NodeStats, class_frequencies, node_stats, node_stats_from_chunks
from jaxtree.tree import Tree, leaf_of, route
from jaxtree import distributed, launch  # rows spread over JAX processes; a local launcher
from sklearn.exceptions import NotFittedError  # what predict raises before fit

__version__ = "0.1.0"

# The public API, by module (docs/api.md lists it in the same order). The modules `distributed`
# and `launch` are public as modules: their functions share names with the one-process ones
# (`distributed.kd_tree`, `distributed.fit`, ...), so they are reached through the module.
__all__ = [
    # estimators (scikit-learn style)
    "PACBayesTreeClassifier", "PrunedTreeClassifier", "HSVoteClassifier", "ObliqueTreeClassifier",
    "PACBayesForestClassifier",
    "PACBayesTreeRegressor", "PrunedTreeRegressor", "NotFittedError", "load",
    # inspecting a fitted model
    "feature_importances", "export_text", "plot_tree",
    # the whole fit as one pure function
    "fit", "predict_proba", "FittedTree",
    # trees
    "Tree", "route", "leaf_of", "kd_tree", "dyadic_tree", "cart_tree",
    "GrowConfig", "GrowInfo", "grow_tree",
    "oblique_tree", "fat", "node_margins", "margin_bound", "tree_margin_bound", "twoing",
    # layouts
    "CompleteLayout", "CompactLayout",
    # statistics
    "NodeStats", "node_stats", "node_stats_from_chunks",
    # the engine
    "PruningProcess", "subtree_log_weights", "log_partition", "pruning_process", "local_offsets",
    "log_weights_from_offsets", "pruning_process_from_offsets", "child_values", "best_pruning",
    "best_pruning_and_cost", "tree_membership",
    # methods: the PAC-Bayes tree
    "pacbayes_potentials", "pacbayes_theory_potentials", "pacbayes_offsets",
    "pacbayes_theory_offsets", "pacbayes_log_weights", "pacbayes_theory_log_weights", "vote",
    "scores_from_paths",
    # methods: pruning
    "c1_leaf_cost", "sn_leaf_cost", "holdout_errors", "rep_pruning", "local_test_pruning",
    "km_pruning", "optimistic_pruning", "min_error_per_size", "pruning_of_size", "srm_select",
    # methods: the HS vote
    "hs_node_estimates", "hs_potentials", "hs_log_weights", "hs_vote",
    # model selection
    "fold_masks", "prepare_folds", "grid_errors", "paper_search", "gradient_tune", "tune",
    "stack_problems", "batch_paper_search", "batch_fit_scores",
    # several processes
    "distributed", "launch",
]
