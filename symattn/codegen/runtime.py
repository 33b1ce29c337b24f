"""The model-independent parts of the compiled Gaussian quadrature, as generated modules import them
(``from symattn.codegen import runtime as _rt``): defined once in ``symbolic.quadrature_rule``, which the
Python quadrature runs too."""
from ..symbolic.quadrature_rule import (  # noqa: F401
    HESSIAN,
    STEIN,
    STEIN_CONDITION,
    VALUE,
    exp_table,
    finish,
    jacobi,
    mean_term_data,
    node_map,
    node_map_conditioned,
    pack,
    rule_1d,
    score_moments,
    term_data,
    unpack,
)
