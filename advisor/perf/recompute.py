"""What a configuration recomputes in its backward pass: every layer (full recompute) or,
under selective recompute, the modules named by `ParallelConfig.recompute_modules`
(Megatron-Core's `--recompute-modules`). The memory, compute and communication models ask it
the same questions, one boolean column per module."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.core.parallel import DEFAULT_RECOMPUTE_MODULES, RECOMPUTE_MODULES


@dataclass(frozen=True)
class Recompute:
    """Per configuration (column vectors, configurations × 1): `full` recompute, and for each
    of `RECOMPUTE_MODULES` whether selective recompute recomputes it (`module(name)`)."""

    full: np.ndarray
    selective: np.ndarray
    modules: dict[str, np.ndarray]

    @classmethod
    def of(cls, configs) -> Recompute:
        """From configuration columns `recompute` and, where given, `recompute_modules`
        (canonical names, `advisor.core.parallel.recompute_modules_name`; default core_attn)."""
        recompute = np.asarray(configs["recompute"], dtype=object)[:, None]
        n = len(recompute)
        named = (np.asarray(configs["recompute_modules"], dtype=object)
                 if configs.get("recompute_modules") is not None
                 else np.full(n, DEFAULT_RECOMPUTE_MODULES, dtype=object))
        selective = recompute == "selective"
        if n and (named == named[0]).all():           # one list (the common case): no sort
            values, which = np.array([str(named[0])]), np.zeros(n, dtype=np.intp)
        else:
            values, which = np.unique(named.astype(str), return_inverse=True)
        listed = [set(v.split()) for v in values]
        modules = {name: selective & np.array([name in s for s in listed])[which][:, None]
                   for name in RECOMPUTE_MODULES}
        return cls(full=recompute == "full", selective=selective, modules=modules)

    def module(self, name: str) -> np.ndarray:
        """Selective recompute of `name` (one of `RECOMPUTE_MODULES`)."""
        return self.modules[name]
