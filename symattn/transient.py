"""Objects that pickle without their process-local caches (lambdified functions, compiled modules),
rebuilt on first use after loading (the derivation store, ``derivation.store``)."""
from __future__ import annotations


class PicklesWithoutCaches:
    """Mixin: ``TRANSIENT`` names attributes (caches) left out of the pickled state."""

    TRANSIENT: tuple = ()

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k not in self.TRANSIENT}

    def __setstate__(self, state):
        self.__dict__.update(state)
