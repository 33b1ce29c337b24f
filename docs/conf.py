"""Sphinx configuration of the symattn documentation (build: ``sphinx-build -W -n docs docs/_build/html``).

Markdown pages through MyST, the executed notebooks through MyST-NB without re-executing them, the CLI
reference from the argparse parser (sphinx-argparse), the API from the docstrings (autodoc). MathJax 3 is
served from the build itself (the ``django-static-mathjax`` package's copy), so the math renders without
network access. A public function or class without a docstring is a build warning (``-W``: an error).
"""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "_ext"))

project = "symattn"
author = "The symattn developers"
from symattn.version import __version__ as release  # noqa: E402

version = release
extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinxarg.ext", "docstring_check"]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3
nb_execution_mode = "off"                 # the committed notebooks carry their outputs
exclude_patterns = ["_build", "notebooks/figures", "notebooks/*.py", "README.md"]
suppress_warnings = ["myst.xref_missing"]  # links to repository files outside the site (examples/, benchmarks/)
html_theme = "furo"
html_title = f"symattn {release}"
html_static_path = ["_static"]
autodoc_typehints = "none"               # no network for intersphinx: signatures, not cross-linked types
autodoc_member_order = "bysource"
nitpicky = True

# MathJax from the build, not from a CDN
import mathjax  # noqa: E402  (django-static-mathjax)

_MJ = os.path.join(os.path.dirname(mathjax.__file__), "static", "mathjax", "es5", "tex-svg.js")
os.makedirs(os.path.join(HERE, "_static", "mathjax"), exist_ok=True)
shutil.copyfile(_MJ, os.path.join(HERE, "_static", "mathjax", "tex-svg.js"))
mathjax_path = "mathjax/tex-svg.js"
# an undefined macro is a typesetting error (an merror node the browser check finds), not red text
mathjax3_config = {"tex": {"packages": {"[-]": ["noundefined"]}}}
