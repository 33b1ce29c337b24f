"""Sphinx extension: a public function, class or method documented by autodoc without a docstring is a
warning (with ``-W``, an error), so the API reference cannot silently lose an entry's text."""
from sphinx.util import logging

logger = logging.getLogger(__name__)


def _check(app, what, name, obj, options, lines):
    short = name.rsplit(".", 1)[-1]
    if what in ("function", "class", "method") and not short.startswith("_") and not any(l.strip() for l in lines):
        logger.warning(f"public {what} {name} has no docstring", type="symattn", subtype="docstring")


def setup(app):
    app.connect("autodoc-process-docstring", _check)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
