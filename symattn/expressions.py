"""Safe parsing of the expressions a spec may hold (``model.activation``, ``model.loss``).

A spec is a file researchers pass around, so reading one must never run code. SymPy's
``sympify``/``parse_expr`` call ``eval``; this module instead parses the text with Python's
``ast`` into a small allowed node set and builds the SymPy expression itself:

- numbers (int, float), the constants ``pi`` and ``E``;
- the symbols the caller allows (``z`` for an activation, ``G_i_j_k`` for a loss), nothing else;
- ``+ - * / **`` (``^`` is read as ``**``, as SymPy does), unary ``±``, comparisons inside
  ``Piecewise`` conditions, tuples as ``Piecewise`` arguments;
- calls of whitelisted functions by plain name (:data:`FUNCTIONS`), positional arguments only.

Attribute access, subscripts, keywords, lambdas, strings, comprehensions, names outside the
whitelist, and any other node raise :class:`ExpressionError` naming the offending piece. The
size of the text, the nesting depth and the exponent of a power are bounded, so a hostile
expression cannot exhaust memory or the recursion limit.
"""
from __future__ import annotations

import ast
import math

import sympy as sp

MAX_LENGTH = 4000          # characters
MAX_DEPTH = 60             # nesting of the syntax tree
MAX_EXPONENT = 16          # |p| of a numeric power z**p (Wick expectations grow like p!)

FUNCTIONS = {
    "exp": sp.exp, "log": sp.log, "sqrt": sp.sqrt,
    "sin": sp.sin, "cos": sp.cos, "tan": sp.tan,
    "sinh": sp.sinh, "cosh": sp.cosh, "tanh": sp.tanh,
    "asin": sp.asin, "acos": sp.acos, "atan": sp.atan,
    "erf": sp.erf, "erfc": sp.erfc,
    "Abs": sp.Abs, "abs": sp.Abs, "sign": sp.sign,
    "Max": sp.Max, "Min": sp.Min, "max": sp.Max, "min": sp.Min,
    "Heaviside": sp.Heaviside, "Piecewise": sp.Piecewise,
}
CONSTANTS = {"pi": sp.pi, "E": sp.E}

_BINOPS = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b, ast.Pow: None, ast.BitXor: None,
}
_COMPARE = {ast.Lt: sp.Lt, ast.LtE: sp.Le, ast.Gt: sp.Gt, ast.GtE: sp.Ge}
_CHAINS = {ast.Add: "sum", ast.Sub: "sum", ast.Mult: "product", ast.Div: "product"}


class ExpressionError(ValueError):
    """An expression outside the allowed grammar (the message names the offending piece)."""


def parse_expression(text: str, symbols: dict) -> sp.Expr:
    """SymPy expression of ``text``, built without ``eval`` (module docstring).

    ``symbols``: name → SymPy symbol for the only free names allowed. Raises ExpressionError."""
    if not isinstance(text, str):
        raise ExpressionError(f"expected a string, got {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"expression too long ({len(text)} characters, at most {MAX_LENGTH})")
    if "\x00" in text:
        raise ExpressionError("expression contains a NUL character")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ExpressionError(f"cannot parse {_short(text)!r} as an expression") from None
    expr = _Builder(symbols).build(tree.body, 0)
    if not isinstance(expr, sp.Expr) or isinstance(expr, sp.Tuple):
        raise ExpressionError("the expression must be a number-valued formula")
    if expr.has(sp.zoo, sp.nan, sp.oo, -sp.oo):
        raise ExpressionError("the expression is not finite (it contains a division by zero or an infinity)")
    for node in sp.preorder_traversal(expr):           # powers combined by SymPy: (z**16)**16 is z**256
        if isinstance(node, sp.Pow) and node.exp.is_number and abs(float(node.exp)) > MAX_EXPONENT:
            raise ExpressionError(f"the power {_short(sp.sstr(node))} has an exponent beyond {MAX_EXPONENT} "
                                  f"(after combining nested powers)")
    return expr


def _short(text: str, n: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n] + "…"


class _Builder:
    def __init__(self, symbols: dict):
        self.symbols = symbols

    def build(self, node, depth):
        if depth > MAX_DEPTH:
            raise ExpressionError(f"expression nested deeper than {MAX_DEPTH} levels")
        d = depth + 1
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, bool):                 # Piecewise((z, z > 0), (0, True))
                return sp.true if v else sp.false
            if not isinstance(v, (int, float)):
                raise ExpressionError(f"constant {v!r} is not a number")
            if isinstance(v, float) and not math.isfinite(v):
                raise ExpressionError(f"constant {v!r} is not finite")
            if isinstance(v, int) and abs(v) > 10**15:
                raise ExpressionError(f"integer constant {v} too large")
            return sp.Integer(v) if isinstance(v, int) else sp.Float(v)
        if isinstance(node, ast.Name):
            if node.id in self.symbols:
                return self.symbols[node.id]
            if node.id in CONSTANTS:
                return CONSTANTS[node.id]
            if node.id in FUNCTIONS:
                raise ExpressionError(f"function {node.id} used without arguments")
            allowed = ", ".join(sorted(self.symbols)) if len(self.symbols) <= 6 else "the declared symbols"
            raise ExpressionError(f"unknown name {node.id!r} (allowed: {allowed}, pi, E)")
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            x = self.build(node.operand, d)
            return -x if isinstance(node.op, ast.USub) else x
        if isinstance(node, ast.BinOp) and type(node.op) in _CHAINS:
            return self._chain(node, d)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            a, b = self.build(node.left, d), self.build(node.right, d)
            if isinstance(node.op, (ast.Pow, ast.BitXor)):
                return self._power(a, b)
            return _BINOPS[type(node.op)](a, b)
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute):
                raise ExpressionError(f"attribute access .{node.func.attr} is not allowed")
            if not isinstance(node.func, ast.Name):
                raise ExpressionError("only functions called by plain name are allowed")
            if node.func.id not in FUNCTIONS:
                raise ExpressionError(f"function {node.func.id!r} is not allowed (allowed: "
                                      f"{', '.join(sorted(FUNCTIONS))})")
            if node.keywords:
                raise ExpressionError(f"{node.func.id}: keyword arguments are not allowed")
            if not node.args or len(node.args) > 16:
                raise ExpressionError(f"{node.func.id}: expected 1 to 16 arguments")
            args = [self.build(a, d) for a in node.args]
            try:
                return FUNCTIONS[node.func.id](*args)
            except (TypeError, ValueError) as exc:
                raise ExpressionError(f"{node.func.id}: invalid arguments ({_short(str(exc))})") from None
        if isinstance(node, ast.Tuple):
            return sp.Tuple(*[self.build(e, d) for e in node.elts])
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            return _COMPARE[type(node.ops[0])](self.build(node.left, d), self.build(node.comparators[0], d))
        if isinstance(node, ast.Attribute):
            raise ExpressionError(f"attribute access .{node.attr} is not allowed")
        raise ExpressionError(f"{type(node).__name__} is not allowed in an expression")

    def _chain(self, node, d):
        """a + b − c + … (or a·b/c·…) as one level of nesting: Python parses a flat sum of n terms as a left-deep
        tree of depth n, which is no nesting a reader sees."""
        group = _CHAINS[type(node.op)]
        ops = []
        while isinstance(node, ast.BinOp) and _CHAINS.get(type(node.op)) == group:
            ops.append((node.op, node.right))
            node = node.left
        out = self.build(node, d)
        for op, right in reversed(ops):
            out = _BINOPS[type(op)](out, self.build(right, d))
        return out

    @staticmethod
    def _power(a, b):
        if not b.is_number:
            raise ExpressionError("the exponent of a power must be a number (use exp(...) otherwise)")
        try:
            big = abs(float(b)) > MAX_EXPONENT
        except TypeError:
            raise ExpressionError("the exponent of a power must be a real number") from None
        if big:
            raise ExpressionError(f"exponent {b} too large (|exponent| <= {MAX_EXPONENT})")
        return a ** b


# ---------------------------------------------------------------------------- the spec's expressions
Z = sp.Symbol("z")          # the activation's variable


def activation_expr(name: str, beta: float = 1.0):
    """SymPy expression in z of an element-wise activation (None for softmax, which acts on rows)."""
    z = sp.Symbol("z")
    table = {
        "linear": z, "h1": z,
        "h2": (z**2 - 1) / sp.sqrt(2),
        "h3": (z**3 - 3 * z) / sp.sqrt(6),
        "relu": sp.Max(z, 0),
        "tanh": sp.tanh(z),
    }
    return table.get(name)


def activation_sympy(value: str):
    """The SymPy expression in z of a custom activation string (safe parser, no ``eval``)."""
    return parse_expression(value, {"z": Z})


def loss_symbols(L: int, K: int) -> dict:
    """name → SymPy symbol of every pre-activation G_i_j_k (1-based) of a custom loss."""
    return {f"G_{i}_{j}_{k}": sp.Symbol(f"G_{i}_{j}_{k}", real=True)
            for i in range(1, L + 1) for j in range(1, L + 1) for k in range(1, K + 1)}


def loss_sympy(value: str, L: int, K: int):
    """The SymPy expression of a custom loss string (safe parser, no ``eval``)."""
    return parse_expression(value, loss_symbols(L, K))
