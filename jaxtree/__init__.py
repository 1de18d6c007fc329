"""jaxtree: learning with partition trees in JAX — PAC-Bayes voting over all prunings, and pruning.

The functional core (pure functions on arrays and pytrees; jit / vmap / grad friendly)::

    tree  = jaxtree.kd_tree(X, max_depth=12, y=y)                 # or dyadic_tree
    stats = jaxtree.node_stats(tree, X, y, num_classes)            # counts [nodes, L]
    log_w = jaxtree.pacbayes_log_weights(tree, stats, lam1, lam2)  # [nodes]
    proba = jaxtree.vote(tree, stats.label, log_w, X_test, num_classes)

and scikit-learn-style estimators over it (:class:`PACBayesTreeClassifier`). Any other potentials
go through ``jaxtree.subtree_log_weights(phi, tree.internal, layout=tree.layout)``;
``jaxtree.pruning_process`` gives the same distribution as a branching process.
"""

from jaxtree.build import dyadic_tree, kd_tree
from jaxtree.cart import cart_tree
from jaxtree.compact import CompactLayout
from jaxtree.engine import (PruningProcess, best_pruning, best_pruning_and_cost, child_values,
                            local_offsets, log_partition, log_weights_from_offsets,
                            pruning_process, pruning_process_from_offsets, subtree_log_weights,
                            tree_membership)
from jaxtree.estimators import ObliqueTreeClassifier, PACBayesTreeClassifier
from jaxtree.estimators import HSVoteClassifier, PrunedTreeClassifier
from jaxtree.hsvote import hs_log_weights, hs_node_estimates, hs_potentials, hs_vote
from jaxtree.layout import CompleteLayout
from jaxtree.prune import (c1_leaf_cost, holdout_errors, km_pruning, local_test_pruning,
                           min_error_per_size, optimistic_pruning, pruning_of_size, rep_pruning,
                           sn_leaf_cost, srm_select)
from jaxtree.oblique import (fat, margin_bound, node_margins, oblique_tree, tree_margin_bound,
                             twoing)
from jaxtree.persist import load
from jaxtree.pacbayes import (pacbayes_authors_log_weights, pacbayes_authors_offsets,
                              pacbayes_authors_potentials, pacbayes_log_weights,
                              pacbayes_offsets, pacbayes_potentials,
                              pacbayes_theory_log_weights, pacbayes_theory_offsets,
                              pacbayes_theory_potentials, scores_from_paths, vote)
from jaxtree.select import (batch_fit_scores, batch_paper_search, fold_masks, gradient_tune,
                            grid_errors, paper_search, prepare_folds, stack_problems, tune)
from jaxtree.shapes import enable_compilation_cache
from jaxtree.stats import NodeStats, node_stats, node_stats_from_chunks
from jaxtree.tree import Tree, leaf_of, route
from jaxtree import distributed, launch  # rows spread over JAX processes; a local launcher
from sklearn.exceptions import NotFittedError  # what predict raises before fit

__version__ = "0.1.0"
