"""The package's structure as an import graph: modules, lines, rooms, floors, arrows, and arrows running back up.

A *room* is a top-level module of ``symattn`` or a subpackage (its modules together); an *arrow* is a room that
imports another (module level or inside a function, absolute or relative; counted once per pair); the *floors*
layer the rooms so that every arrow points down (the rooms of a cycle share a floor); an arrow *running back up* is
one inside such a cycle (imports under ``if TYPE_CHECKING`` never run and are not arrows). With ``--trace`` also the modules whose code a ``theory`` command runs
(``symattn theory tied_h2_L1_small --time 0.01 --points 3``, in-process, warm cache).

Run: ``python benchmarks/import_graph.py [ROOT] [--trace]`` (ROOT: a checkout, default this one).
"""
from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path


def modules(pkg: Path) -> dict:
    """dotted name → path of every module under the package folder ``pkg``."""
    out = {}
    for p in sorted(pkg.rglob("*.py")):
        rel = p.relative_to(pkg.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def imports_of(name: str, path: Path, known: dict) -> set:
    """The package's modules ``name`` imports (every ``import``/``from`` anywhere in it)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):                        # imports for type checkers only never run
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = []
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    got = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rsplit(".", 1)[0] if "." in t else ""
            if t and t != name:
                got.add(t)
    return got


def room(mod: str) -> str:
    parts = mod.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else parts[0]


def sccs(nodes, edges) -> list:
    """Strongly connected components (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)
    for v in nodes:
        if v not in index:
            visit(v)
    return out


def structure(root: Path) -> dict:
    pkg = root / "symattn"
    mods = modules(pkg)
    lines = sum(len(p.read_text().splitlines()) for p in mods.values())
    arrows = defaultdict(set)
    for name, path in mods.items():
        for t in imports_of(name, path, mods):
            a, b = room(name), room(t)
            if a != b and a != "symattn" and b != "symattn":       # the package's own __init__ re-exports everything
                arrows[a].add(b)
    rooms = sorted({room(m) for m in mods} - {"symattn"})
    comps = sccs(rooms, arrows)
    comp_of = {v: i for i, c in enumerate(comps) for v in c}
    floor = {}
    for c in comps:                                    # Tarjan emits components in reverse topological order
        i = comp_of[c[0]]
        below = [floor[comp_of[w]] for v in c for w in arrows.get(v, ()) if comp_of[w] != i]
        floor[i] = 1 + max(below, default=0)
    back = sorted((a, b) for a in arrows for b in arrows[a] if comp_of[a] == comp_of[b])
    return {"modules": len(mods), "lines": lines, "rooms": len(rooms), "floors": max(floor.values()),
            "arrows": sum(len(v) for v in arrows.values()), "back_up": back,
            "cycles": [sorted(c) for c in comps if len(c) > 1]}


def traced_modules(root: Path) -> list:
    """The package's modules whose code runs in ``theory tied_h2_L1_small --time 0.01 --points 3`` (warm)."""
    import io
    import os
    from contextlib import redirect_stdout
    sys.path.insert(0, str(root))
    from symattn.cli import main
    with redirect_stdout(io.StringIO()):
        main(["theory", "tied_h2_L1_small", "--time", "0.01", "--points", "3", "--quiet"])     # warm the caches
    seen = set()
    pkg = str(root / "symattn") + os.sep

    def prof(frame, event, arg):
        if event == "call":
            f = frame.f_code.co_filename
            if f.startswith(pkg):
                seen.add(f[len(pkg):])
    sys.setprofile(prof)
    try:
        with redirect_stdout(io.StringIO()):
            main(["theory", "tied_h2_L1_small", "--time", "0.01", "--points", "3", "--quiet"])
    finally:
        sys.setprofile(None)
    return sorted(seen)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    root = Path(args[0] if args else Path(__file__).resolve().parents[1]).resolve()
    s = structure(root)
    print(f"{root.name}: {s['modules']} modules, {s['lines']} lines, {s['rooms']} rooms, {s['floors']} floors, "
          f"{s['arrows']} arrows, {len(s['back_up'])} running back up")
    for a, b in s["back_up"]:
        print(f"  back up: {a} → {b}")
    if "--trace" in sys.argv:
        mods = traced_modules(root)
        print(f"a warm `theory` runs code in {len(mods)} modules: {', '.join(mods)}")
