"""Where each GPU sits in its node's cooling path, and the temperature its power gives it.

A node's slots and their airflow come from `advisor/catalog/chassis.toml` (HGX air: rear slots
breathe the front slots' exhaust; cold plates: no coupling; MI250: two GCDs per package with a
skew). Pipeline stages land in slots by Megatron's rank order (tp fastest, then cp, dp, pp:
`tp-cp-ep-dp-pp`), so a stage of fewer GPUs than a node shares the node with its neighbours, and
a stage of a whole node or more has GPUs in every slot.

Temperatures are first-order: steady = inlet (+ the upstream GPU's preheat) + R · average
power, with R the chassis' thermal resistance (°C per W: each platform's heat sink or cold
plate); the peak follows a burst of power above the average for as long as the burst lasts
against the die's time constant. The inlet is the room's (`Platform.inlet_c`, from
`--inlet-c` or a cluster file) where given, else the chassis' default.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from importlib import resources

import numpy as np

from advisor.core.errors import CatalogError
from advisor.core.platform import Platform


@dataclass(frozen=True)
class Chassis:
    """How a node's devices sit in the cooling path (one entry of `chassis.toml`)."""

    name: str
    description: str
    num_slots: int
    upstream: tuple[int, ...]
    """Per slot, the slot whose exhaust it breathes; -1 for fresh inlet air."""
    row: tuple[str, ...]
    """Per slot, `front` or `rear`."""
    inlet_c: float
    """Default supply air (coolant) temperature."""
    resistance_c_per_w: float
    """Steady rise above its inlet per watt of a GPU's average power."""
    preheat_share: float
    """A downstream GPU's inlet warms by this share of its upstream GPU's rise."""
    time_constant_s: float
    package_skew_c: float
    """Extra temperature of the second device of a two-device package."""
    platforms: tuple[str, ...] = ()
    """Catalog platforms built into this chassis."""
    sources: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def placeholders(self) -> list[str]:
        """The keys whose source is a placeholder."""
        return sorted(k for k, v in self.sources.items() if v.startswith("placeholder"))


@functools.cache
def chassis_catalog() -> dict[str, Chassis]:
    """Every chassis in `advisor/catalog/chassis.toml` by name."""
    import tomllib

    text = resources.files("advisor.catalog").joinpath("chassis.toml").read_text(
        encoding="utf-8")
    out = {}
    for name, entry in tomllib.loads(text)["chassis"].items():
        entry = dict(entry)
        sources = entry.pop("sources", {})
        try:
            chassis = Chassis(name=name, upstream=tuple(entry.pop("upstream")),
                              row=tuple(entry.pop("row")),
                              platforms=tuple(entry.pop("platforms", ())), sources=sources,
                              **entry)
        except (TypeError, KeyError) as e:
            raise CatalogError(f"chassis.toml [chassis.{name}]: {e}") from None
        if not (len(chassis.upstream) == len(chassis.row) == chassis.num_slots):
            raise CatalogError(f"chassis.toml [chassis.{name}]: upstream and row need one "
                               f"entry per slot ({chassis.num_slots}).")
        for key in ("inlet_c", "resistance_c_per_w", "preheat_share", "time_constant_s",
                    "package_skew_c", "upstream"):
            if not str(sources.get(key, "")).strip():
                raise CatalogError(f"chassis.toml [chassis.{name}]: {key} has no source.")
        out[name] = chassis
    return out


def chassis_for(platform: Platform) -> Chassis:
    """The platform's chassis (its `chassis` key, else the chassis that lists it, else by its
    cooling), resized to its devices per node when a tray holds another count."""
    catalog = chassis_catalog()
    listed = [c.name for c in catalog.values() if platform.name in c.platforms]
    name = platform.chassis or (listed[0] if listed else None) or (
        "cold-plate" if platform.cooling == "liquid" else "hgx-air")
    if name not in catalog:
        raise CatalogError(f"{platform.name}: chassis {name!r} is unknown; use one of "
                           f"{', '.join(sorted(catalog))}.")
    chassis = catalog[name]
    n = platform.num_gpus_per_node
    if n == chassis.num_slots:
        return chassis
    if any(u >= 0 for u in chassis.upstream):
        # Air-cooled nodes of another size: the first half front, the second behind it.
        half = n // 2
        upstream = tuple([-1] * (n - half) + list(range(half)))
        row = tuple(["front"] * (n - half) + ["rear"] * half)
    else:
        upstream, row = (-1,) * n, ("front",) * n
    return dataclasses.replace(chassis, num_slots=n, upstream=upstream, row=row)


@dataclass(frozen=True)
class SlotMap:
    """Which slots every pipeline stage occupies (configs × stages × slots of a node).

    Entry (c, s, i) is the i-th GPU of stage s within one node-period of the rank order:
    rank = s·G + i for i < min(G, slots), G = tp·cp·dp GPUs per stage.
    """

    valid: np.ndarray
    """Whether entry i is a GPU of stage s (False past G when a stage is smaller than a node)."""
    slot: np.ndarray
    """Its slot in the node."""
    upstream_stage: np.ndarray
    """The stage of the GPU it breathes from (-1: fresh air)."""
    upstream_index: np.ndarray
    """That GPU's entry index within its stage."""
    skewed: np.ndarray
    """The second device of a two-device package."""

    @functools.cached_property
    def upstream_entry(self) -> np.ndarray:
        """Each entry's upstream GPU as an index into its configuration's stages × slots
        (configs × stages·slots); an entry breathing fresh air holds a valid but meaningless
        index, which `breathes_exhaust` masks."""
        n, pp, k = self.upstream_stage.shape
        return (np.clip(self.upstream_stage, 0, pp - 1) * k
                + self.upstream_index).reshape(n, -1)

    @functools.cached_property
    def breathes_exhaust(self) -> np.ndarray:
        """Whether an entry's inlet is another GPU's exhaust."""
        return self.upstream_stage >= 0


def slot_map(chassis: Chassis, *, gpus_per_stage: np.ndarray, pp: int,
             stage_order: np.ndarray | None = None) -> SlotMap:
    """Stages in slots by rank order; `stage_order` (configs × pp) gives the rank position of
    every stage when a placement permutes them (default: stage s at position s)."""
    k = chassis.num_slots
    g = np.asarray(gpus_per_stage, dtype=np.int64)[:, None, None]
    n = g.shape[0]
    position = (np.broadcast_to(np.arange(pp), (n, pp)) if stage_order is None
                else np.asarray(stage_order))[:, :, None]
    i = np.arange(k)[None, None, :]
    rank = position * g + i
    slot = rank % k
    upstream_slot = np.asarray(chassis.upstream)[slot]
    up_rank = rank - slot + upstream_slot
    up_position = np.where(upstream_slot >= 0, up_rank // g, -1)
    # Back from rank positions to stages (the inverse of the placement).
    if stage_order is None:
        up_stage = up_position
    else:
        inverse = np.argsort(np.asarray(stage_order), axis=1)
        found = np.take_along_axis(inverse, np.clip(up_position, 0, pp - 1).reshape(n, -1),
                                   axis=1).reshape(up_position.shape)
        up_stage = np.where(up_position >= 0, found, -1)
    up_stage = np.where((up_stage >= 0) & (up_stage < pp), up_stage, -1)
    up_index = np.where(up_stage >= 0, up_rank - up_position * g, 0)
    up_index = np.clip(up_index, 0, k - 1)
    skewed = (slot % 2 == 1) & (chassis.package_skew_c > 0)
    valid = np.broadcast_to(i < g, rank.shape)
    return SlotMap(valid=valid, slot=slot, upstream_stage=up_stage, upstream_index=up_index,
                   skewed=skewed)


def inlet_temperature(chassis: Chassis, platform: Platform) -> float:
    """The supply air (coolant) temperature: the platform's (room's) where set, else the
    chassis default."""
    return chassis.inlet_c if platform.inlet_c is None else float(platform.inlet_c)


def steady_temperature(chassis: Chassis, inlet_c: float, avg_power_w: np.ndarray,
                       slots: SlotMap) -> np.ndarray:
    """Steady temperature of every entry: inlet, plus the upstream GPU's preheat, plus its own
    rise; the skewed device of a package on top."""
    own_rise = chassis.resistance_c_per_w * avg_power_w
    n, pp, k = own_rise.shape
    flat = own_rise.reshape(n, pp * k)
    up_rise = np.take_along_axis(flat, slots.upstream_entry, axis=1).reshape(n, pp, k)
    preheat = np.where(slots.breathes_exhaust, chassis.preheat_share * up_rise, 0.0)
    skew = np.where(slots.skewed, chassis.package_skew_c, 0.0)
    return inlet_c + preheat + own_rise + skew


def burst_reach(chassis: Chassis, burst_s: np.ndarray) -> np.ndarray:
    """The share 1 − e^(−t/τ) of the way to its new steady temperature a die gets in a burst
    lasting `burst_s` (first order)."""
    return 1.0 - np.exp(-np.maximum(burst_s, 0.0) / chassis.time_constant_s)


def burst_heating(chassis: Chassis, burst_w: np.ndarray, avg_w: np.ndarray,
                  reach: np.ndarray) -> np.ndarray:
    """How far above its steady temperature a GPU climbs during one burst of `burst_w` that
    gets `reach` (`burst_reach`) of the way to the step it would settle to."""
    return chassis.resistance_c_per_w * np.maximum(burst_w - avg_w, 0.0) * reach
