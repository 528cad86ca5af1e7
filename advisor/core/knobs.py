"""The knobs of a training layout, declared once: what search tunes, pins fix, rationale names
and recommendations tell apart. `ParallelConfig` holds the values; the CLI's pin options
(`--tp`, ..., `--overlap/--no-overlap`) carry the same names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Knob:
    name: str
    """The `ParallelConfig` field (or, for `overlap`, the derived switch)."""
    label: str
    """How a platform engineer writes it (`TP`, `sharding`)."""
    layout: bool = False
    """It splits the GPUs: two recommendations that differ in it are different layouts. The
    others (virtual pipeline, micro-batch, recompute, sharding, overlap) tune one layout."""
    searched: bool = True
    """Search chooses it; `dp` follows from the others and the GPU count."""
    meaning: str = ""
    """What it sets, for help texts (`tensor-parallel size`)."""
    values: str = ""
    """Its values in words, where they are names (recompute: `none, selective or full`)."""

    @property
    def flag(self) -> str:
        """The command-line option (`--tp`, `--dp-sharding`, `--overlap/--no-overlap`)."""
        dashed = "--" + self.name.replace("_", "-")
        return f"{dashed}/--no-{self.name}" if self.name == "overlap" else dashed


KNOBS = (
    Knob("tp", "TP", layout=True, meaning="tensor-parallel size"),
    Knob("pp", "PP", layout=True, meaning="pipeline-parallel stages"),
    Knob("vp", "VP", meaning="virtual pipeline stages per GPU (interleaved 1F1B)"),
    Knob("cp", "CP", layout=True, meaning="context-parallel size"),
    Knob("dp", "DP", layout=True, searched=False, meaning="data-parallel replicas"),
    Knob("ep", "EP", layout=True, meaning="expert-parallel size (MoE)"),
    Knob("etp", "ETP", layout=True, meaning="expert tensor-parallel size (MoE)"),
    Knob("mbs", "MBS", meaning="micro-batch size in sequences"),
    Knob("recompute", "recompute", meaning="activation recompute",
         values="none, selective or full"),
    Knob("dp_sharding", "sharding", meaning="data-parallel sharding",
         values="none (plain DDP), optimizer (distributed optimizer, ZeRO-1) or full (FSDP, "
                "ZeRO-3); ddp, zero1 and fsdp are read as these"),
    Knob("overlap", "overlap", meaning="communication overlap (gradient reduce, parameter "
         "gather, TP communication)", values="on or off"),
)
"""In the order a layout is written (`TP 8 · PP 2 (VP 5) · DP 4 ...`)."""

NAMES = tuple(k.name for k in KNOBS)
BY_NAME = {k.name: k for k in KNOBS}
LABEL = {k.name: k.label for k in KNOBS}
LAYOUT = tuple(k.name for k in KNOBS if k.layout)
"""What makes two recommendations different layouts: how the GPUs are split."""
SEARCH_ORDER = ("tp", "cp", "pp", "vp", "ep", "etp", "mbs", "recompute", "dp_sharding", "overlap")
"""The searched knobs in the order Optuna suggests them (a seeded study's draws depend on it,
so it stays as it was)."""
assert set(SEARCH_ORDER) == {k.name for k in KNOBS if k.searched}

TABLE_ORDER = ("tp", "pp", "dp", "cp", "ep", "etp", "vp", "mbs", "recompute", "dp_sharding")
"""How tables and summaries list a layout's stored knobs (`overlap` is derived: `overlap()`)."""
assert set(TABLE_ORDER) | {"overlap"} == set(NAMES)

OVERLAP_FIELDS = ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap")
"""The switches the `overlap` knob turns on and off together."""


def overlap(values: Any) -> Any:
    """The `overlap` knob of a configuration row (a dict or Series: a bool) or of a table of
    them (a DataFrame: a boolean Series): any of `OVERLAP_FIELDS` on."""
    a, b, c = (values[f] for f in OVERLAP_FIELDS)
    if hasattr(a, "__len__") and not isinstance(a, str):
        return a | b | c
    return bool(a or b or c)


def knob_values(row: Any) -> dict[str, object]:
    """Every knob's value in a configuration row (dict or Series)."""
    from advisor.core.parallel import recompute_label

    values = {k: row[k] for k in NAMES if k != "overlap"}
    values["recompute"] = recompute_label(row["recompute"], row.get("recompute_modules"))
    values["overlap"] = overlap(row)
    return values


def sorted_values(values: Any) -> list:
    """A knob's values in the order a person reads them: numbers as numbers (1, 2, 4, 10, 20,
    not 1, 10, 2, 20, 4), off before on, names as written (none, selective, full) —
    never as text."""
    values = list(values)

    def key(v: Any) -> tuple:
        item = v.item() if hasattr(v, "item") else v
        if isinstance(item, bool):
            return (0, int(item), "")
        if isinstance(item, (int, float)):
            return (1, item, "")
        return (2, _NAME_ORDER.get(str(item), len(_NAME_ORDER)), str(item))

    return sorted(values, key=key)


_NAME_ORDER = {name: i for i, name in enumerate(
    ("none", "selective", "optimizer", "full"))}
"""Named values in their knob's order (recompute none < selective < full; sharding none <
optimizer < full)."""
