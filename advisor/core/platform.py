"""`Platform`: one accelerator type and the node/network it sits in, loaded from TOML."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.core.errors import CatalogError, shown_value
from advisor.core.limits import GPUS, check_most, magnitude


@dataclass(frozen=True)
class Platform:
    """An accelerator and its surroundings. All numbers are per device, SI units.

    A "device" is what torch and the launcher see as one GPU: a whole GPU on NVIDIA and MI300X,
    one GCD on MI250 (two per package).
    """

    name: str
    display_name: str
    vendor: str
    family: str
    """Architecture family (ampere, hopper, blackwell, cdna2, cdna3): platforms of one family share
    the calibrated efficiencies of the performance model."""
    device_unit: str
    """`gpu`, or `gcd` where one package holds two devices (MI250)."""
    num_devices_per_package: int
    hbm_bytes: float
    """Memory per device as the vendor prints it (decimal)."""
    hbm_bandwidth_bytes_per_s: float
    peak_flops_per_s: dict[str, float]
    """Dense peak per precision class: bf16, fp16, fp8, fp4 (absent where unsupported)."""
    tdp_w: float
    idle_power_w: float
    num_gpus_per_node: int
    nvlink_domain_size: int
    """Devices that reach each other over NVLink/NVSwitch/xGMI (8 for HGX, 72 for NVL72)."""
    intra_domain_bandwidth_bytes_per_s: float
    """Per device, one direction."""
    intra_domain_latency_s: float
    inter_node_bandwidth_bytes_per_s: float
    """Per device, one direction, across the scale-out network."""
    inter_node_latency_s: float
    thermal_slowdown_c: float
    """GPU temperature at which the firmware lowers clocks (nvidia-smi's "GPU Slowdown Temp")."""
    memory_max_c: float
    cooling: str
    """`air` or `liquid`."""
    hbm_usable_bytes: float | None = None
    """Memory the driver reports as total (nvidia-smi), where known; else `hbm_bytes`."""
    base_clock_hz: float | None = None
    boost_clock_hz: float | None = None
    """The maximum SM (compute-unit) clock the driver reports (nvidia-smi "Max Clocks SM",
    rocminfo "Max Clock Freq."): where a lone kernel runs, and what power-capped clock
    fractions are measured against."""
    peak_clock_hz: float | None = None
    """The clock the datasheet's `peak_flops_per_s` is stated at: compute units × dense FLOP
    per clock per unit × this clock. Below `boost_clock_hz` on Hopper (1,830 against 1,980 MHz)
    and Blackwell; equal to it on A100 and AMD parts."""
    num_compute_units: int | None = None
    """Streaming multiprocessors (NVIDIA) or compute units (AMD) per device: the GEMM model's
    wave quantization (`advisor/perf/gemm.py`)."""
    collective_kernels: str | None = None
    """Which measured collective table prices collectives inside the device's NVLink/xGMI
    domain (`h100`, `b200`, `gb200`, `gb300`, `mi300x`, `mi355x` in
    `advisor/catalog/collective_kernels.toml`); None: the constants fitted on A100's NCCL tables
    (`calibration.toml [collectives]`)."""
    gemm_kernels: str | None = None
    """Which measured GEMM table's kernel parameters the device runs (`sm_90`, `sm_100`,
    `gfx942`, `gfx950`: `advisor/catalog/gemm_kernels.toml`); None: the generic prior, scaled
    by the family's end-to-end fit."""
    num_nics_per_node: int | None = None
    """Scale-out NICs per node, where the catalog or a cluster file states it; with
    `nic_bandwidth_bytes_per_s` it sets `inter_node_bandwidth_bytes_per_s` (their product shared
    by the node's devices)."""
    nic_bandwidth_bytes_per_s: float | None = None
    """One NIC's bandwidth, one direction."""
    chassis: str | None = None
    """How the node's devices sit in the cooling path (`advisor/catalog/chassis.toml`); None
    takes `hgx-air` for air cooling and `cold-plate` for liquid."""
    thermal_shutdown_c: float | None = None
    """GPU temperature at which the board shuts down (nvidia-smi's "GPU Shutdown Temp"), where
    published: no steady temperature may reach it."""
    power_limit_w: float | None = None
    """The GPU power limit in force (`nvidia-smi -pl`, `amd-smi set --power-cap`); None: the
    board's default, `tdp_w`. A cluster file, `--power-limit-w` or the search sets it."""
    min_power_limit_w: float | None = None
    """The lowest power limit the vendor's tool sets on this part (nvidia-smi -q "Min Power
    Limit", amd-smi static --limit "MIN_POWER"), where a public dump gives it; None:
    `POWER_LIMIT_FLOOR_SHARE` × `tdp_w`. The highest is `tdp_w` ("Max Power Limit")."""
    inlet_c: float | None = None
    """The room's inlet air (or the coolant supply, liquid cooling) at the chassis; None: the
    chassis' default (`advisor/catalog/chassis.toml`)."""
    degraded_nodes: int | None = None
    """Nodes of the job whose GPUs are held at `degraded_power_w` (a power fault, a capped
    PSU: finding 6 of Go et al., MICRO'25); None or absent: none."""
    degraded_power_w: float | None = None
    """The power limit of the degraded nodes' GPUs."""
    gemm_power_w: float | None = None
    """What a best-fed GEMM (a power probe's continuous 8192³ BF16 load) draws at full clock on
    this chip, where a site's own probe of its chips measured it (`collectors/power_probe.py`;
    a cluster file); None: the power model's cross-chip `busy_share` × `tdp_w`, which every
    catalog chip uses (`advisor/perf/power_fit.py` says why the H200 probe does not set
    H200's)."""
    host_power_w: float | None = None
    """Power of one node besides its GPUs (CPUs, memory, fans, NICs, switches, power-supply
    loss), where a measurement gives it: with the GPUs' average it makes the node's draw that
    `--max-node-power-w` bounds."""
    pue: float | None = None
    """Power usage effectiveness of the data centre the cluster runs in (facility power over IT
    power: cooling, power distribution), where the cluster file gives it; None: 1, the IT load
    alone (the GPUs and their hosts). Wall energy per token is multiplied by it."""
    electricity_usd_per_kwh: float | None = None
    """Price of electricity at the cluster (US dollars per kWh), where the cluster file gives
    it; None: `advisor.perf.money.DEFAULT_ELECTRICITY_USD_PER_KWH` (the 2025 US industrial
    average)."""
    gpu_hour_usd: float | None = None
    """On-demand rental price of one device for an hour (US dollars), where a public rate card
    gives one: the default of `--gpu-hour-price` for the cost objective."""
    aliases: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    path: str = field(default="", compare=False, repr=False)

    @property
    def limit_w(self) -> float:
        """The power limit in force: `power_limit_w` where set, else the board's `tdp_w`."""
        return self.power_limit_w or self.tdp_w

    @property
    def power_limit_range_w(self) -> tuple[float, float]:
        """(lowest, highest) power limit the vendor's tool sets (`min_power_limit_w`, `tdp_w`)."""
        return power_limit_floor_w(self.min_power_limit_w, self.tdp_w), self.tdp_w

    @property
    def memory_capacity_bytes(self) -> float:
        """Bytes a training process can address: the driver's total where the catalog has it."""
        return self.hbm_usable_bytes or self.hbm_bytes

    def capacity_note(self) -> str:
        """Why the capacity shown differs from the name's (H200 "141 GB" shown as 150 GB), or ""
        where it does not."""
        usable = self.hbm_usable_bytes
        if not usable or abs(usable / self.hbm_bytes - 1) < 0.02:
            return ""
        gib = usable / 2**30
        unit = (f"the datasheet's {self.hbm_bytes / 1e9:.0f} GB counts binary gigabytes "
                f"(the driver's {gib:.1f} GiB)" if abs(gib / (self.hbm_bytes / 1e9) - 1) < 0.03
                else f"the datasheet says {self.hbm_bytes / 1e9:.0f} GB")
        return (f"{usable / 1e9:.1f} GB per GPU is what the driver reports usable (decimal GB, "
                f"as every figure here); {unit}")

    def peak_flops(self, precision_class: str) -> float:
        """Dense peak FLOP/s for a precision class (`bf16`, `fp16`, `fp8`, `fp4`)."""
        try:
            return self.peak_flops_per_s[precision_class]
        except KeyError:
            have = ", ".join(sorted(self.peak_flops_per_s))
            raise CatalogError(
                f"{self.name} has no {precision_class} tensor cores; it supports {have}."
            ) from None

    def full_clock_peak_flops(self, precision_class: str) -> float:
        """Dense FLOP/s at `boost_clock_hz`, the clock a kernel runs at while no limit holds
        it back: the datasheet peak scaled from `peak_clock_hz` (H100: 989.4e12 at 1,830 MHz
        is 1,070.5e12 at 1,980 MHz). The datasheet peak where either clock is unknown."""
        peak = self.peak_flops(precision_class)
        if self.boost_clock_hz and self.peak_clock_hz:
            return peak * self.boost_clock_hz / self.peak_clock_hz
        return peak

    def supports(self, precision_class: str) -> bool:
        return precision_class in self.peak_flops_per_s

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("path")
        d["aliases"] = list(self.aliases)
        return d


_REQUIRED = [f.name for f in dataclasses.fields(Platform) if f.default is dataclasses.MISSING
             and f.default_factory is dataclasses.MISSING]  # type: ignore[misc]
_OPTIONAL = {f.name for f in dataclasses.fields(Platform)} - set(_REQUIRED) - {"sources", "path"}
_TYPES = {f.name: f.type for f in dataclasses.fields(Platform)}
_ENUMS = {"vendor": {"nvidia", "amd", "cpu"}, "device_unit": {"gpu", "gcd", "cpu"},
          "cooling": {"air", "liquid"}}
MAY_BE_ZERO = frozenset({"electricity_usd_per_kwh"})
"""Platform numbers that may be 0 (every other must be positive)."""
PRECISION_CLASSES = ("bf16", "fp16", "fp8", "fp4", "tf32", "fp32")


def check_keys(data: dict[str, Any], where: str) -> None:
    """Every key of a platform or cluster file is a platform key (`base`, `sources` too); an
    unknown one is named first, with the nearest known key, before anything asks for its
    source."""
    import difflib

    known = {*_REQUIRED, *_OPTIONAL, "base", "sources"}
    unknown = sorted(k for k in data if k not in known)
    if unknown:
        near = difflib.get_close_matches(unknown[0], sorted(known), n=1)
        raise CatalogError(f"{where}: unknown key(s) {', '.join(unknown)}"
                           f"{f' (did you mean {near[0]}?)' if near else ''}; see "
                           f"advisor/catalog/SCHEMA.md for the platform keys.")


def platform_from_dict(data: dict[str, Any], *, path: Path) -> Platform:
    """Build a validated `Platform`; errors name the file and the key."""
    where = str(path)
    check_keys(data, where)
    missing = [k for k in _REQUIRED if k not in data and not (
        k == "inter_node_bandwidth_bytes_per_s" and "num_nics_per_node" in data)]
    if missing:
        raise CatalogError(f"{where}: missing key(s) {', '.join(missing)}.")
    values: dict[str, Any] = {}
    sources = check_sources(data, where)
    for key, value in data.items():
        if key in ("sources", "base"):
            continue
        if key == "peak_flops_per_s":
            if not isinstance(value, dict) or not value:
                raise CatalogError(f"{where}: peak_flops_per_s must be a table like "
                                   f"{{ bf16 = 989e12 }}.")
            flops = {}
            for prec, v in value.items():
                if prec not in PRECISION_CLASSES:
                    raise CatalogError(f"{where}: peak_flops_per_s.{prec}: unknown precision; "
                                       f"use one of {', '.join(PRECISION_CLASSES)}.")
                flops[prec] = _in_range("peak_flops_per_s", _positive(
                    v, f"{where}: peak_flops_per_s.{prec}"), f"{where}: peak_flops_per_s.{prec}")
                _need_source(sources, f"peak_flops_per_s.{prec}", where)
            values[key] = flops
        elif key == "aliases":
            if not isinstance(value, (list, tuple)) or not all(isinstance(a, str)
                                                               for a in value):
                raise CatalogError(f"{where}: aliases must be a list of strings, got "
                                   f"{shown_value(value)}.")
            values[key] = tuple(str(a).lower() for a in value)
        elif key in ("name", "display_name", "vendor", "family", "device_unit", "cooling",
                     "chassis", "gemm_kernels", "collective_kernels"):
            if not isinstance(value, str):
                raise CatalogError(f"{where}: {key} must be a string, got {value!r}.")
            if key in _ENUMS and value not in _ENUMS[key]:
                raise CatalogError(f"{where}: {key} = {value!r}; use one of "
                                   f"{', '.join(sorted(_ENUMS[key]))}.")
            values[key] = value.lower() if key in ("name", "family") else value
        elif key in MAY_BE_ZERO and isinstance(value, (int, float)) and value == 0:
            values[key] = 0.0          # power included in a rental rate
            _need_source(sources, key, where)
        else:
            number = _in_range(key, _positive(value, f"{where}: {key}"), f"{where}: {key}")
            if "int" in str(_TYPES[key]):
                if number != int(number):
                    raise CatalogError(f"{where}: {key} must be a whole number, got {value!r}.")
                number = int(number)
                check_most(f"{where}: {key}", number, GPUS, error=CatalogError)
            values[key] = number
            _need_source(sources, key, where)
    _derive_network(values, data, where)
    _check_thermal_limits(values, where)
    _check_power_limits(values, where)
    _check_clocks(values, where)
    return Platform(**values, sources=dict(sources), path=where)


def check_sources(data: dict[str, Any], where: str) -> dict[str, str]:
    """The file's [sources] table: text for each key."""
    sources = data.get("sources", {})
    if not isinstance(sources, dict) or not all(isinstance(v, str) for v in sources.values()):
        raise CatalogError(f"{where}: [sources] must be a table of key = \"source\", got "
                           f"{shown_value(sources)}.")
    return sources


def _derive_network(values: dict[str, Any], data: dict[str, Any], where: str) -> None:
    """Per-device scale-out bandwidth from the node's NICs, where both NIC keys are given."""
    nics, nic_bw = values.get("num_nics_per_node"), values.get("nic_bandwidth_bytes_per_s")
    if (nics is None) != (nic_bw is None):
        raise CatalogError(f"{where}: num_nics_per_node and nic_bandwidth_bytes_per_s go "
                           f"together; give both or neither.")
    if nics is None:
        return
    derived = nics * nic_bw / values["num_gpus_per_node"]
    given = data.get("inter_node_bandwidth_bytes_per_s")
    if given is not None and abs(given - derived) > 0.01 * derived:
        raise CatalogError(f"{where}: inter_node_bandwidth_bytes_per_s ({given:g}) contradicts "
                           f"num_nics_per_node × nic_bandwidth_bytes_per_s / num_gpus_per_node "
                           f"({nics} × {nic_bw:g} / {values['num_gpus_per_node']} = "
                           f"{derived:g}); drop one or make them agree.")
    values["inter_node_bandwidth_bytes_per_s"] = derived


POWER_LIMIT_FLOOR_SHARE = 0.25
"""The lowest power limit accepted, as a share of `tdp_w`, for a part whose own minimum
(`min_power_limit_w`) the catalog lacks. The vendors' tools refuse caps far below the board's
default: nvidia-smi -q reports "Min Power Limit" 100 W of 400 W on A100-SXM4-40GB (0.25) and
200 W of 700 W on H100 and H200 SXM (0.29; github.com/thamada/nvidia-smi
nvsim/H100SXMx8_smi.py, github.com/thamada/gls gls/H200_smi.py), and AMD's amd-smi
documentation shows MI300X "MIN_POWER: 100 W" of 750 W (github.com/amd/MxGPU-Virtualization
smi-lib/docs/how_to/amdsmi_cli_usage.md): those three parts carry their own minimum, and a
limit between 0.25 × tdp_w and a higher part minimum (175-200 W on H100) is refused, as the
driver refuses it."""

MOST_INLET_C = 60.0
"""The warmest inlet accepted. ASHRAE TC 9.9's air classes top out at A4 (45 °C allowable) and
its liquid classes at W+ (supply above 45 °C); 60 °C leaves room for warm-water cooling while
refusing a °F value or a die temperature given as the inlet. The floor, above 0 °C, is
`_positive`'s."""


def _check_thermal_limits(values: dict[str, Any], where: str) -> None:
    """The board slows its clocks before it shuts down; the inlet is a room's, in °C."""
    slowdown, shutdown = values.get("thermal_slowdown_c"), values.get("thermal_shutdown_c")
    if slowdown is not None and shutdown is not None and shutdown <= slowdown:
        raise CatalogError(f"{where}: thermal_shutdown_c ({shutdown:g} °C) must exceed "
                           f"thermal_slowdown_c ({slowdown:g} °C): the board slows its clocks "
                           f"before it shuts down; take both from nvidia-smi -q (GPU Shutdown/"
                           f"Slowdown Temp) or amd-smi static --limit.")
    inlet = values.get("inlet_c")
    if inlet is not None and inlet > MOST_INLET_C:
        raise CatalogError(f"{where}: inlet_c = {inlet:g} °C is outside 0-{MOST_INLET_C:g} °C; "
                           f"give the air (or coolant supply) temperature at the chassis inlet "
                           f"in °C, e.g. 25.")


def _check_clocks(values: dict[str, Any], where: str) -> None:
    """The datasheet's peak is stated at or below the maximum clock."""
    peak, most = values.get("peak_clock_hz"), values.get("boost_clock_hz")
    if peak is not None and most is not None and peak > most * 1.001:
        raise CatalogError(f"{where}: peak_clock_hz ({peak / 1e6:g} MHz) is above "
                           f"boost_clock_hz ({most / 1e6:g} MHz), the maximum clock; the "
                           f"datasheet's FLOP/s are stated at or below it (H100: 1830 of "
                           f"1980 MHz).")


def power_limit_floor_w(min_power_limit_w: float | None, tdp_w: float) -> float:
    """The lowest power limit accepted: the part's own minimum where the catalog has it, else
    `POWER_LIMIT_FLOOR_SHARE` × `tdp_w`."""
    return min_power_limit_w or POWER_LIMIT_FLOOR_SHARE * tdp_w


def _check_power_limits(values: dict[str, Any], where: str) -> None:
    """Power limits lie between the part's minimum (`power_limit_floor_w`) and the board's
    `tdp_w`, the range the vendor's tool sets; degraded nodes come with their power limit."""
    if ("degraded_nodes" in values) != ("degraded_power_w" in values):
        raise CatalogError(f"{where}: degraded_nodes and degraded_power_w go together; give "
                           f"both (how many nodes, and their GPUs' power limit) or neither.")
    tdp, least = values["tdp_w"], values.get("min_power_limit_w")
    name = values.get("name", "this platform")
    if least is not None and least > tdp:
        raise CatalogError(f"{where}: min_power_limit_w = {least:g} W is above tdp_w "
                           f"({tdp:g} W); take both from nvidia-smi -q (Min/Max Power Limit) "
                           f"or amd-smi static --limit.")
    floor = power_limit_floor_w(least, tdp)
    what = ("min_power_limit_w" if least is not None
            else f"{POWER_LIMIT_FLOOR_SHARE:g} × tdp_w, no part minimum in the catalog")
    for key, unset in (("power_limit_w", "leave it out to run at tdp_w"),
                       ("degraded_power_w", "leave it and degraded_nodes out")):
        limit = values.get(key)
        if limit is not None and not floor <= limit <= tdp:
            raise CatalogError(f"{where}: {key} = {limit:g} W is outside {floor:g}-{tdp:g} W, "
                               f"the power limits {name} accepts ({what}, to tdp_w); set {key} "
                               f"within that range, or {unset}.")


LARGEST_QUANTITY = 1e20
"""No device quantity in SI units comes near it (peak FLOP/s are about 10^16, bandwidths
10^13 B/s): a larger value is a typo, and would overflow the models' products."""


def _positive(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CatalogError(f"{what} must be a number, got {shown_value(value)}.")
    # Compared before any float conversion: an integer of 10^309 has no float (OverflowError).
    if value != value or value <= 0:
        raise CatalogError(f"{what} must be a positive finite number, got {_shown(value)}.")
    if value > LARGEST_QUANTITY:
        raise CatalogError(f"{what} = {_shown(value)} is beyond any device "
                           f"({LARGEST_QUANTITY:g} in SI units); check the unit.")
    return float(value)


def _shown(value: float | int) -> str:
    return magnitude(value) if isinstance(value, int) else f"{value:g}"


PLAUSIBLE = {
    "hbm_bytes": (1e8, 1e14, "bytes"), "hbm_usable_bytes": (1e8, 1e14, "bytes"),
    "hbm_bandwidth_bytes_per_s": (1e6, 1e15, "bytes/s"),
    "intra_domain_bandwidth_bytes_per_s": (1e6, 1e15, "bytes/s"),
    "inter_node_bandwidth_bytes_per_s": (1e6, 1e15, "bytes/s"),
    "nic_bandwidth_bytes_per_s": (1e6, 1e15, "bytes/s"),
    "peak_flops_per_s": (1e9, 1e18, "FLOP/s"),
    "intra_domain_latency_s": (1e-9, 1.0, "s"), "inter_node_latency_s": (1e-9, 1.0, "s"),
    "tdp_w": (1.0, 1e5, "W"), "gemm_power_w": (1.0, 1e5, "W"), "idle_power_w": (0.1, 1e5, "W"),
    "host_power_w": (1.0, 1e6, "W"), "pue": (1.0, 3.0, "ratio"),
    "power_limit_w": (1.0, 1e5, "W"), "degraded_power_w": (1.0, 1e5, "W"),
    "min_power_limit_w": (1.0, 1e5, "W"),
    "thermal_slowdown_c": (20.0, 150.0, "°C"), "thermal_shutdown_c": (20.0, 200.0, "°C"),
    "memory_max_c": (20.0, 150.0, "°C"), "base_clock_hz": (1e6, 1e11, "Hz"),
    "boost_clock_hz": (1e6, 1e11, "Hz"), "peak_clock_hz": (1e6, 1e11, "Hz"),
    "num_compute_units": (1, 100_000, "units"), "gpu_hour_usd": (1e-4, 1e4, "US dollars"),
    "electricity_usd_per_kwh": (0.0, 10.0, "US dollars per kWh"),
}
"""The range a platform number must lie in, far around every device the catalog holds (in
advisor/catalog/platforms: memory 8-279 GB, bandwidths 1.25e9-8e12 B/s, peaks 1.9e11-1.5e16
FLOP/s, latencies 3-100 µs, TDP 5-1,400 W, slowdown 89-100 °C): outside it the value is a typo
or a wrong unit (a NIC of 1e-300 B/s made every step time infinite and every prediction NaN).
Counts are bounded by `advisor.core.limits`; the inlet by `MOST_INLET_C`."""


def _in_range(key: str, value: float, what: str) -> float:
    if key not in PLAUSIBLE:
        return value
    least, most, unit = PLAUSIBLE[key]
    if not least <= value <= most:
        raise CatalogError(f"{what} = {value:g} is outside {least:g}-{most:g} {unit}, the range "
                           f"of any device; check the value and its unit ({unit}).")
    return value


def _need_source(sources: dict[str, str], key: str, where: str) -> None:
    if not str(sources.get(key, "")).strip():
        raise CatalogError(f"{where}: {key} has no entry in [sources]; every number must say "
                           f"where it comes from (or start with 'placeholder:').")
