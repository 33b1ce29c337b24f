"""The model-independent parts of the compiled Gaussian quadrature, as generated modules import them
(``from symattn.codegen import runtime as _rt``): defined once in ``symbolic.quadrature_rule``, which the
Python quadrature runs too."""
from ..symbolic.quadrature_rule import HESSIAN, STEIN, VALUE, finish, jacobi, node_map, rule_1d  # noqa: F401
