"""Sphinx configuration of the jaxtree documentation.

Build: ``python -m sphinx -W -b html docs docs/_build/html`` (warnings are errors; the test suite
runs the same build in ``tests/test_docs.py``).
"""

import jaxtree

project = "jaxtree"
author = "the jaxtree developers"
copyright = "2026, the jaxtree developers"
version = release = jaxtree.__version__

extensions = [
    "myst_parser",            # Markdown pages (MyST)
    "sphinx.ext.autodoc",     # the API reference from the docstrings
    "sphinx.ext.napoleon",    # Google-style "Args:" / "Returns:" sections
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
myst_enable_extensions = ["dollarmath", "amsmath", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "none"            # shapes and dtypes are in the docstrings
autodoc_default_options = {
    "members": True,
    "undoc-members": False,
    # scikit-learn's metadata-routing setters, generated on every estimator; documented there
    "exclude-members": "set_fit_request, set_predict_request, set_predict_proba_request, "
                       "set_score_request",
}
napoleon_google_docstring = True
napoleon_use_ivar = True      # "Attributes:" as fields of the class, not separate objects
napoleon_custom_sections = [("Returns", "params_style")]   # "name: description" entries
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = f"jaxtree {release}"
