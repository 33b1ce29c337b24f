"""Example specifications shipped with the package (``symattn examples`` lists them).

A spec argument that is not an existing file but the name of one of these (with or without
``.toml``, or as ``examples/<name>.toml``) loads the shipped copy, so the README's commands work
from any directory after a non-editable install.
"""
from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def example_names() -> list:
    return sorted(p.stem for p in HERE.glob("*.toml"))


def example_path(name: str) -> Path | None:
    """The shipped file of an example name (``tied_h2_L1``, ``tied_h2_L1.toml``,
    ``examples/tied_h2_L1.toml``), or None."""
    stem = Path(str(name)).name
    stem = stem[:-5] if stem.endswith(".toml") else stem
    parent = Path(str(name)).parent
    if str(parent) not in (".", "examples"):
        return None
    path = HERE / f"{stem}.toml"
    return path if path.is_file() else None


def example_description(name: str) -> str:
    """One line describing a shipped example: the first line of its leading comment."""
    path = example_path(name)
    lines = [ln[1:].strip() for ln in (path.read_text().splitlines() if path else []) if ln.startswith("#")]
    return lines[0].rstrip(".") if lines else ""
