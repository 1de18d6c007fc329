"""Experiments and benchmarks for jaxtree (run as modules: ``python -m experiments.<name>``)."""
