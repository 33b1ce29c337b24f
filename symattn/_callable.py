"""Modules that are also the function of the same name (docs/interface.md "Python").

``symattn.derive(spec, truncation=M)``, ``symattn.integrate(system, ...)``, ``symattn.simulate(...)``
and ``symattn.compare(...)`` are the documented entry points, while ``symattn.derive`` etc. are also
(sub)modules. Importing a submodule rebinds the parent's attribute to the module, so instead of
shadowing, each such module is made callable: calling it calls its namesake function.
"""
import sys
import types


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        return getattr(self, self.__name__.rsplit(".", 1)[-1])(*args, **kwargs)


def make_callable(module_name: str) -> None:
    """Calling the module ``module_name`` calls its function of the same (last) name."""
    sys.modules[module_name].__class__ = _CallableModule
