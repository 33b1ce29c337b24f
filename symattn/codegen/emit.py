"""Emit a Python/Numba module for the right-hand side of a moment system.

The module holds the derived data (words, sparse terms), the gradient of Φ (closed form printed from
SymPy; each quadrature term as a compiled expectation with its integrand written out, its Gaussian
data and its 1-d rule), ``coefficients(mu, params)`` and ``rhs(t, mu, params)``. It needs numpy,
numba and, for models with quadrature terms, ``symattn.codegen.runtime`` (the model-independent
pieces, compiled once per machine). Output is deterministic: same model structure and truncation →
same bytes (floats are printed rounded to 15 significant digits). The fixed parts of the module
(header, Gaussian rule, coefficients, right-hand side, the expectation loop) are template files in
``codegen/templates``; this module fills them with the derived data.
"""
from __future__ import annotations

import hashlib
import re
import string
from functools import cache
from pathlib import Path

import numpy as np
import sympy as sp
from sympy.printing.pycode import pycode

from ..symbolic.gaussian import BETA, LABEL_NOISE
from ..symbolic.quadrature import canonical_basis
from . import runtime
from .load import KERNELS_BEGIN, KERNELS_END


def fnum(x) -> str:
    """Deterministic float literal."""
    x = float(x)
    if x == 0:
        return "0.0"
    return repr(float(f"{x:.15g}"))


def array_literal(a, dtype="np.float64") -> str:
    a = np.asarray(a)
    if a.dtype.kind in "iu":
        body = repr(a.tolist())
    else:
        body = _nested(a)
    return f"np.array({body}, dtype={dtype})"


def _nested(a):
    if a.ndim == 0:
        return fnum(a)
    return "[" + ", ".join(_nested(x) for x in a) + "]"


def _wrap(items, width=96, indent="    "):
    lines, cur = [], indent
    for it in items:
        piece = it + ", "
        if len(cur) + len(piece) > width and cur.strip():
            lines.append(cur.rstrip())
            cur = indent
        cur += piece
    if cur.strip():
        lines.append(cur.rstrip())
    return "\n".join(lines)


def int_array(name, values) -> str:
    return f"{name} = np.array([\n{_wrap([str(int(v)) for v in values])}\n], dtype=np.int64)\n"


def float_array(name, values) -> str:
    return f"{name} = np.array([\n{_wrap([fnum(v) for v in values])}\n], dtype=np.float64)\n"


def _expr_code(exprs, args, name, arg_name="x", out_len=None):
    """A compiled function of x returning the vector of SymPy expressions of args[i] = x[i], with CSE."""
    subs = {a: sp.Symbol(f"{arg_name}{i}") for i, a in enumerate(args)}
    exprs = [sp.sympify(e).xreplace(subs) for e in exprs]
    reps, reduced = sp.cse(exprs, symbols=sp.numbered_symbols("c"), optimizations=None)
    printer = lambda e: pycode(e, fully_qualified_modules=True)  # noqa: E731
    lines = ["@njit(cache=True)", f"def {name}({arg_name}):"]
    for i in range(len(args)):
        lines.append(f"    {arg_name}{i} = {arg_name}[{i}]")
    for s, e in reps:
        lines.append(f"    {s} = {printer(e)}")
    lines.append(f"    out = np.zeros({out_len or len(reduced)})")
    for i, e in enumerate(reduced):
        if e != 0:
            lines.append(f"    out[{i}] = {printer(e)}")
    lines.append("    return out")
    return "\n".join(lines) + "\n"


def exp_as_powers(expr, variables, bases):
    """expr with every exp(Σ c_i x_i + c) of integer c_i written Π e_i^c_i · exp(c), e_i = exp(x_i)
    (``bases``): a softmax integrand then costs one exponential per variable and node, not one per
    distinct exponent."""
    index = {v: i for i, v in enumerate(variables)}

    def rewrite(arg):
        a = sp.expand(arg)
        coeffs = {v: a.coeff(v) for v in variables}
        rest = sp.expand(a - sum(c * v for v, c in coeffs.items()))
        if rest.free_symbols & set(variables) or not all(c.is_Integer for c in coeffs.values()):
            return sp.exp(arg)
        return sp.exp(rest) * sp.Mul(*[bases[index[v]] ** int(c) for v, c in coeffs.items() if c != 0])
    return sp.sympify(expr).replace(sp.exp, rewrite)


def kernel_loops(exprs, variables, r: int, stein: bool, score: bool = False) -> tuple:
    """(code, uses_exp): the node loop of a compiled expectation — r nested loops over the 1-d nodes,
    each level adding its share to the node's coordinates (x_i = x̄_i + Σ_a A_ia z_a) and exponentials
    (e_i = exp(x̄_i) Π_a exp(A_ia z_a) from tables over the 1-d nodes, see ``exp_as_powers``) and to
    the weight, the innermost evaluating exprs (common subexpressions shared) into scalar accumulators
    acc<j> (and, with Stein's lemma, hy<a><b> += w (P∇f)_a (Σ_y^(-1/2) z)_b; with ``score``, exprs = [f]
    of a jump, the moments sz<a> += w f z_a and szz<a><b> += w f z_a z_b for ``runtime.score_moments``).
    No exponential and no array write per node."""
    xs = [sp.Symbol(f"x{i}") for i in range(len(variables))]
    es = [sp.Symbol(f"e{i}") for i in range(len(variables))]
    sub = dict(zip(variables, xs))
    exprs = [exp_as_powers(sp.sympify(e).xreplace(sub), xs, es) for e in exprs]
    reps, reduced = sp.cse(exprs, symbols=sp.numbered_symbols("c"), optimizations=None)
    used = set().union(*(sp.sympify(e).free_symbols for e in list(reduced) + [r for _, r in reps]))
    ux = [i for i in range(len(xs)) if xs[i] in used]
    ue = [i for i in range(len(xs)) if es[i] in used]
    code = lambda e: pycode(e, fully_qualified_modules=True)  # noqa: E731
    lines = [f"    acc{j} = 0.0" for j in range(len(exprs))]
    lines += [f"    hy{a}{b} = 0.0" for a in range(r) for b in range(r)] if stein else []
    lines += ([f"    sz{a} = 0.0" for a in range(r)] + [f"    szz{a}{b} = 0.0" for a in range(r) for b in range(a, r)]
              if score else [])
    for a in range(r):
        pad = "    " * (a + 1)
        lines.append(f"{pad}for i{a} in range(n):")
        pad += "    "
        lines.append(f"{pad}z{a} = nodes[i{a}]")
        lines.append(f"{pad}w{a} = " + (f"w{a - 1} * " if a else "") + f"weights[i{a}]")
        lines += [f"{pad}s{i}_{a} = " + (f"s{i}_{a - 1}" if a else f"xmean[{i}]") + f" + Amap[{i}, {a}] * z{a}"
                  for i in ux]
        lines += [f"{pad}p{i}_{a} = " + (f"p{i}_{a - 1}" if a else f"emean[{i}]") + f" * etab[{i}, {a}, i{a}]"
                  for i in ue]
    pad = "    " * (r + 1)
    lines += [f"{pad}x{i} = s{i}_{r - 1}" for i in ux] + [f"{pad}e{i} = p{i}_{r - 1}" for i in ue]
    lines += [f"{pad}{s} = {code(e)}" for s, e in reps]
    lines += [f"{pad}o{j} = {code(e)}" for j, e in enumerate(reduced)]
    lines += [f"{pad}acc{j} += w{r - 1} * o{j}" for j in range(len(exprs))]
    if stein:
        nv = len(variables)
        for a in range(r):
            lines.append(f"{pad}pg{a} = " + " + ".join(f"P[{a}, {i}] * o{1 + i}" for i in range(nv)))
            lines.append(f"{pad}wz{a} = " + " + ".join(f"Wh[{a}, {c}] * z{c}" for c in range(r)))
        lines += [f"{pad}hy{a}{b} += w{r - 1} * pg{a} * wz{b}" for a in range(r) for b in range(r)]
    if score:
        lines.append(f"{pad}wf = w{r - 1} * o0")
        lines += [f"{pad}sz{a} += wf * z{a}" for a in range(r)]
        lines += [f"{pad}szz{a}{b} += wf * z{a} * z{b}" for a in range(r) for b in range(a, r)]
        sz = "np.array([" + ", ".join(f"sz{a}" for a in range(r)) + "])"
        szz = "np.array([" + ", ".join("[" + ", ".join(f"szz{min(a, b)}{max(a, b)}" for b in range(r)) + "]"
                                       for a in range(r)) + "])"
        lines.append(f"    acc, Hy = _rt.score_moments(acc0, {sz}, {szz}, Wh, P)")
        return "\n".join(lines), bool(ue)
    lines.append("    acc = np.array([" + ", ".join(f"acc{j}" for j in range(len(exprs))) + "])")
    hy = ("np.array([" + ", ".join("[" + ", ".join(f"hy{a}{b}" for b in range(r)) + "]" for a in range(r)) + "])"
          if stein else f"np.zeros(({r}, {r}))")
    lines.append(f"    Hy = {hy}")
    return "\n".join(lines), bool(ue)


EXP_TABLES = """\
    emean = np.exp(xmean)                               # e_i = exp(x̄_i) Π_a exp(A_ia z_a)
    etab = _rt.exp_table(Amap, nodes)
"""
WITH_LAW = """@njit(cache=True)
def _with_law(theta, law):
    \"\"\"(θ, s², β): the argument vector of the closed forms (law = (label-noise variance s²,
    inverse temperature β) = params[2:4]).\"\"\"
    t = np.empty(theta.shape[0] + 2)
    t[:-2] = theta
    t[-2] = law[0]
    t[-1] = law[1]
    return t
"""
MODES = {"value": runtime.VALUE, "hessian": runtime.HESSIAN, "stein": runtime.STEIN, "fast": runtime.STEIN,
         "score": runtime.STEIN}
OUTPUTS = {"value": "[f]", "hessian": "[f, ∇f, upper ∇²f]", "stein": "[f, ∇f], E∇²f by Stein's lemma",
           "fast": "[f, ∇f], E∇²f by Stein's lemma; NaN when Σ_y is ill-conditioned",
           "score": "[f] of a jump, E∇f and E∇²f by Stein's lemma; NaN when Σ_y is ill-conditioned"}
NODE_MAP = "    Amap, xmean, Wh = _rt.node_map(P, mu0, mut, cov0, covt, theta)\n"
NODE_MAP_GUARDED = """\
    Amap, xmean, Wh, ratio = _rt.node_map_conditioned(P, mu0, mut, cov0, covt, theta)
    if ratio <= _rt.STEIN_CONDITION:                 # Stein's lemma would divide by a near-null Σ_y
        return math.nan, np.zeros(mut.shape[0])
"""


# the node loops of smooth integrands may reorder their sums (LLVM then vectorises them: the L = 2 softmax
# cross term 36 → 20 µs); no "nnan"/"ninf" (a NaN must propagate, it is reported), no "contract" and
# nothing for kinked or value-only integrands, whose nodes must round as the Python quadrature's do
SMOOTH_FASTMATH = ', fastmath={"reassoc", "nsz"}'


def _kernel(mode, exprs, variables, r, kernels: dict) -> int:
    """The id of the compiled expectation of ``exprs`` in ``mode``, registered in ``kernels``."""
    body, uses_exp = kernel_loops(exprs, variables, r, mode in ("stein", "fast"), score=mode == "score")
    key = (body, mode)
    if key not in kernels:
        fid = len(kernels)
        kernels[key] = (fid, template("quad_term.py.tmpl").substitute(
            fid=fid, r=r, nv=len(variables), mode=MODES[mode], outputs=OUTPUTS[mode], loops=body,
            node_map=NODE_MAP_GUARDED if mode in ("fast", "score") else NODE_MAP, tables=EXP_TABLES if uses_exp else "",
            fastmath=SMOOTH_FASTMATH if mode in ("fast", "hessian") else ""))
    return kernels[key][0]


def quad_term_code(tag, term, position, gradient, kernels: dict):
    """(source, calls, kernel ids) of one quadrature term (symbolic.quadrature.QuadTerm): its β = 1 Gaussian data
    as arrays and the calls of its compiled expectations ``_expect_<id>`` on ``D[position]`` (the
    data packed at run time for β and the orders, ``quadrature_rule.term_data``), registered in
    ``kernels`` ((body, mode) → (id, source)) unless an earlier term has the same integrand (the rows
    of a softmax share one); ``module_source`` emits them as one block. A smooth term with a gradient
    has two: Stein's lemma ("fast", NaN where Σ_y is ill-conditioned), then the Hessian route — Numba
    compiles the second only if a state ever needs it."""
    v, nv = term.variables, len(term.variables)
    P = canonical_basis(term.P)
    r = P.shape[0]
    grads = list(term.outputs[:1 + nv])
    if not gradient:
        fids = [_kernel("value", [term.expr], v, r, kernels)]
    elif term.score:
        fids = [_kernel("score", [term.expr], v, r, kernels)]
    elif term.stein:
        fids = [_kernel("stein", grads, v, r, kernels)]
    else:                               # of the Hessian the upper triangle
        hess = [term.outputs[1 + nv + i * nv + j] for i in range(nv) for j in range(i, nv)]
        fids = [_kernel("fast", grads, v, r, kernels), _kernel("hessian", grads + hess, v, r, kernels)]
    src = [f"# quadrature term {tag}: variables {', '.join(s.name for s in v)}; "
           f"{r} effective dimension(s), at most {term.cap} nodes per dimension, integrand {fids[0]}",
           f"_P_{tag} = {array_literal(P)}",
           f"_MU0_{tag} = {array_literal(term.mu0)}",
           f"_MUT_{tag} = {array_literal(term.mu_theta)}",
           f"_COV0_{tag} = {array_literal(term.cov0)}",
           f"_COVT_{tag} = {array_literal(term.cov_theta)}",
           f"_T_{tag} = (_P_{tag}, _MU0_{tag}, _MUT_{tag}, _COV0_{tag}, _COVT_{tag}, {term.cap}, "
           f"{fnum(term.half_width)})\n"]
    calls = [f"_expect_{fid}(theta, D[{position}])" for fid in fids]
    return "\n".join(src), calls if gradient else [calls[0] + "[0]"], fids


TEMPLATES = Path(__file__).with_name("templates")


@cache
def template(name: str) -> string.Template:
    """A code template of ``codegen/templates`` (string.Template: the templates only substitute
    values — the loops over the derived data stay in Python — and ``$`` never occurs in the
    generated Python, so no template engine is needed)."""
    return string.Template((TEMPLATES / name).read_text())



def expectation_code(E, fname, tag, gradient=True, kernels=None):
    """``fname(theta, law)``: E[f] (and ∂/∂θ when ``gradient``) as closed form + quadrature terms, at
    law = (label-noise variance s², inverse temperature β) (the closed forms take (θ, s², β) as one
    vector; the quadrature terms their data packed for β, ``_data``).

    Returns (source, whether E has quadrature terms): their orders are run-time data (``set_orders``).
    ``kernels``: the integrands emitted so far in the module (shared between expectations).
    """
    kernels = {} if kernels is None else kernels
    syms = E.symbols
    closed = [E.closed_form] + (E.closed_gradient() if gradient else [])
    parts = [_expr_code(closed, list(syms) + [LABEL_NOISE, BETA], f"_closed_{tag}", arg_name="t")]
    jit = [] if E.base_terms else ["@njit(cache=True)"]     # numba would re-optimise the integrands
    body = jit + [f"def {fname}(theta, law):", f"    out = _closed_{tag}(_with_law(theta, law))",
                  "    val = out[0]"]
    body += ["    grad = out[1:].copy()"] if gradient else []
    if E.base_terms:
        body += [f"    D = _data({fname!r}, law[1])", "    beta = law[1]"]
    entries, routes = [], []
    for n, term in enumerate(E.base_terms):
        code, calls, fids = quad_term_code(f"{tag}{n}", term, n, gradient, kernels)
        parts.append(code)
        entries.append(f"_T_{tag}{n}")
        routes.append("(" + "".join(f"_expect_{f}, " for f in fids) + ")")
        w = " * ".join(([f"law[0] ** {term.noise_power}"] if term.noise_power else [])
                       + ([f"beta ** {term.beta_power}"] if term.beta_power else []))
        w = w + " * " if w else ""
        if gradient:
            body += [f"    f, g = {calls[0]}"]
            if len(calls) > 1:
                body += ["    if f != f:                            # ill-conditioned Σ_y (or a NaN integrand)",
                         f"        f, g = {calls[1]}"]
            body += [f"    val += {w}f", f"    grad += {w}g"]
        else:
            body += [f"    val += {w}{calls[0]}"]
    if entries:
        parts.append(f"_TERMS[{fname!r}] = ({', '.join(entries)},)\n"
                     f"_KERNELS[{fname!r}] = ({', '.join(routes)},)\n")
    body.append("    return val, grad" if gradient else "    return val")
    return "\n\n".join(parts) + "\n\n" + "\n".join(body) + "\n", bool(E.base_terms)


def gradient_entries(potential, var="g") -> dict:
    """(matrix, k, l) -> the expression of GΩ_kl ("GO"), GΨ_kl ("GP") and Γ_kl = GΩ_kl + GΨ_kl ("Gamma")
    (K×K, full-matrix convention of derive.potential) in the plain partial derivatives ``var`` = ∂Φ/∂θ;
    a pair with Ω = Ψ = q splits ∂Φ/∂q evenly. Scalars, no arrays: nothing to allocate or compile."""
    K = potential.spec.K
    _, _, o_pos, p_pos, weight = potential.split_plan()
    out = {}
    for k in range(K):
        for l in range(K):
            n = k * K + l
            c, io, ip = float(weight[n]), int(o_pos[n]), int(p_pos[n])
            out["GO", k, l] = f"{c!r} * {var}[{io}]"
            out["GP", k, l] = f"{c!r} * {var}[{ip}]"
            out["Gamma", k, l] = f"{2 * c!r} * {var}[{io}]" if io == ip else f"{c!r} * ({var}[{io}] + {var}[{ip}])"
    return out


MEAN_HESSIAN_QUAD = """    beta = law[1]
    theta_x = np.concatenate((theta, np.zeros(${pairs})))
    for data, kernels, (noise_power, beta_power) in zip(_mean_data(beta), _KERNELS["phi_and_grad"], _POWERS):
        f, g = kernels[0](theta_x, data)
        if f != f and len(kernels) > 1:           # ill-conditioned Σ_y: the Hessian route, as in phi_and_grad
            f, g = kernels[1](theta_x, data)
        g = 2.0 * law[0] ** noise_power * beta ** beta_power * g[theta.shape[0]:]
        c = 0
        for i in range(${n}):
            for j in range(i, ${n}):
                H[i, j] += g[c]
                if j != i:
                    H[j, i] += g[c]
                c += 1
"""


def mean_hessian_code(P) -> str:
    """``phi_mean_hessian(theta, law)``: the exact ∂²Φ/∂m_a∂m_b over every mean of Φ (``Potential.mean_hessian``) —
    the closed form's second derivatives printed, each quadrature term's μ_aᵀE[∇²f]μ_b by its own kernels
    (``quadrature_rule.mean_term_data``); "" when Φ has no mean."""
    pos = [int(p) for p in P.split_plan()[1]]
    if not pos:
        return ""
    syms, n = P.symbols, len(pos)
    means = [syms[p] for p in pos]
    closed = _expr_code([sp.diff(P.closed_form, a, b) for a in means for b in means],
                        list(syms) + [LABEL_NOISE, BETA], "_mean_hessian_closed", arg_name="t", out_len=n * n)
    quad = bool(P.base_terms)
    powers = tuple((t.noise_power, t.beta_power) for t in P.base_terms)
    return template("mean_hessian.py.tmpl").substitute(
        mean_params=repr(pos), closed=closed, n=n, jit="" if quad else "@njit(cache=True)\n",
        quad_helpers=template("mean_hessian_quad.py.tmpl").substitute(powers=repr(powers)) if quad else "",
        quad_doc=", plus per quadrature term w·μ_aᵀE[∇²f]μ_b (twice its kernel's derivative along the covariance "
                 "direction (μ_aμ_bᵀ + μ_bμ_aᵀ)/2, Price's theorem)" if quad else "",
        quad=string.Template(MEAN_HESSIAN_QUAD).substitute(pairs=n * (n + 1) // 2, n=n) if quad else "")


FILL_HEAD = '''
@njit(cache=True)
def _fill_coefficients(mu, theta, g, params):
    """coef[key] from ∂Φ/∂θ = g at state mu and order parameters theta."""
'''


def module_source(system, kind: str, coefficient_lines: list, theta: str = "mu[THETA_WORDS]", extra: str = "",
                  expectations=()) -> str:
    """Source of the generated module of a derived ``System`` (``theta``: the expression of θ at state mu).

    Always emits ``phi_and_grad`` (Φ and ∂Φ/∂θ); ``expectations`` adds value-only functions
    (E, function name, tag), e.g. the SGD-noise constants ν.
    """
    from ..version import __version__

    P = system.potential
    spec_text = system.spec_text()
    words = system.word_names()
    quad = (f"Quadrature: {len(P.base_terms)} terms; their nodes per dimension are run-time data, calibrated at the\n"
            f"initial state a run starts from: set_orders(β, orders) (symattn calibrates and sets them; a module\n"
            f"written by `symattn derive` ends by setting the β = 1 orders of its spec's initial state)\n"
            ) if P.base_terms else ""
    head = template("header.py.tmpl").substitute(
        version=__version__, kind=kind[0].upper() + kind[1:], M=system.truncation, nmom=system.size,
        nterms=len(system.terms), digest=hashlib.sha256(spec_text.encode()).hexdigest()[:16],
        phi=sp.sstr(P.closed_form) + (" + E[non-polynomial terms]" if P.base_terms else ""),
        quad=quad, spec=_indent(spec_text), words=_indent("\n".join(f"{i}: {w}" for i, w in enumerate(words))),
        equations=_indent(_equations_text(system)))
    T = system.terms
    src = [head]
    src.append(f"NAMES = {P.names!r}  # order parameters θ of Φ\n")
    src.append(f"COEF_NAMES = {system.coef_names!r}\n")
    src.append(f"N_MOMENTS = {system.size}\n")
    src.append(int_array("THETA_WORDS", system.theta_words))
    src.append(int_array("ROW", T["row"]))
    src.append(int_array("C1", T["c1"]))
    src.append(int_array("C2", T["c2"]))
    src.append(int_array("KEY", T["key"]))
    src.append(float_array("VAL", T["val"]))
    kernels = {}
    code, quadrature = expectation_code(P, "phi_and_grad", "phi", gradient=True, kernels=kernels)
    blocks = [WITH_LAW, code]
    for E, fname, tag in expectations:
        c, q = expectation_code(E, fname, tag, gradient=False, kernels=kernels)
        blocks.append(c)
        quadrature |= q
    hessian = mean_hessian_code(P)
    if hessian:
        blocks.append(hessian)
    if kernels:
        blocks.insert(0, KERNELS_BEGIN + "\n" + "\n\n".join(text for _, text in kernels.values()) + KERNELS_END)
    if quadrature:
        blocks.insert(0, template("gauss_rule.py.tmpl").template)
    src.append("\n" + "\n\n".join(blocks))
    jit = "" if quadrature else "@njit(cache=True)\n"
    fill_lines = f"    coef = np.zeros({len(system.coef_names)})\n" + "\n".join(coefficient_lines) + "\n    return coef"
    if jit:                  # all compiled: the lines inline (each compiled layer costs ≈ 0.3 s of compilation)
        fill, body = "", fill_lines
    else:                    # Python glue around the kernels: the lines compiled on their own
        fill = (FILL_HEAD + fill_lines + "\n\n")
        body = "    return _fill_coefficients(mu, theta, g, params)"
    src.append(template("coefficients.py.tmpl").substitute(jit=jit, fill=fill, body=body, theta=theta))
    if extra:
        src.append(extra)
    src.append(template("rhs.py.tmpl").substitute(jit=jit, theta=theta))
    text = "\n".join(src)
    return re.sub(r"[ \t]+\n", "\n", text)


DOCSTRING_EQUATIONS = 200        # moments up to which a module's docstring writes its equations out


def _equations_text(system) -> str:
    """The equations of a system for its module's docstring (System.equations in plain text), or, for a system of
    more than DOCSTRING_EQUATIONS moments, where to get them (printing thousands of lines helps no reader)."""
    if system.size > DOCSTRING_EQUATIONS:
        return (f"({system.size} moments: too many to list here; symattn derive SPEC --truncation {system.truncation} "
                f"--equations text prints them, System.equations() gives them as SymPy)")
    return "\n".join(system._sympy.text(closed=False))


def _indent(text, pre="    "):
    return "\n".join(pre + line if line else line for line in text.splitlines())
