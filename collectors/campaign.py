"""Campaign files: which models, platform, GPU counts and knob values to measure, within what
budget, with which warm-up, measured steps, cool-down and timeout.

    name = "cpu-smoke"
    platform = "cpu"
    device = "cpu"
    [budget]
    runs = 8
    [[models]]
    name = "llama3-8b"
    scale = { num_layers = 2, hidden_size = 64, ffn_hidden_size = 128, num_attention_heads = 4,
              num_kv_heads = 2, vocab_size = 256 }
    [sweep]
    num_gpus = [2]
    seq_len = [32]
    gbs = [8]
    tp = [1, 2]
    recompute = ["none", "full"]

`seq_len` and `gbs` left out of [sweep] take advisor's defaults for the model (its native
sequence length capped at 8192; about 2M tokens per step). Built-in templates live in
collectors/templates/*.toml (`load_campaign("paper-h200-parallelism")`).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

from advisor.core.errors import ConfigError, shown_value
from advisor.core.parallel import DP_SHARDING, MOE_DISPATCHERS, PRECISIONS, RECOMPUTE
from collectors.spec import FRAMEWORKS

TEMPLATES = Path(__file__).parent / "templates"
SWEEP_KNOBS = ("num_gpus", "seq_len", "gbs", "precision", "tp", "pp", "dp", "cp", "ep", "etp",
               "vp", "mbs", "recompute", "dp_sharding", "overlap", "ep_comm_overlap",
               "moe_dispatcher")
"""Keys of [sweep]: job fields (num_gpus, seq_len, gbs, precision) and configuration knobs
(ep_comm_overlap and moe_dispatcher apply to the layouts with ep > 1 that can run them)."""
STRATEGIES = ("grid", "active", "targeted")
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class CampaignModel:
    name: str
    scale: dict[str, int] = field(default_factory=dict)
    sweep: dict[str, tuple] = field(default_factory=dict)
    """Per-model [sweep] entries that replace the campaign's (e.g. its sequence length)."""


@dataclass(frozen=True)
class Campaign:
    name: str
    platform: str
    models: tuple[CampaignModel, ...]
    sweep: dict[str, tuple]
    device: str = "cpu"
    max_runs: int | None = None
    max_gpu_hours: float | None = None
    warmup_steps: int = 2
    measure_steps: int = 3
    cooldown_s: float = 0.0
    timeout_s: float = 600.0
    telemetry: str = "auto"
    telemetry_hz: float = 20.0
    strategy: str = "active"
    seed: int = 0
    framework: str = "pytorch"
    """pytorch (collectors.workload), megatron (a Megatron-LM checkout in $MEGATRON_LM) or
    nemo (`nemo` on PATH)."""
    path: str = ""

    def sweep_values(self, knob: str, default: object, model: CampaignModel | None = None
                     ) -> tuple:
        if model is not None and knob in model.sweep:
            return model.sweep[knob]
        return self.sweep.get(knob, (default,))


def load_campaign(name_or_path: str) -> Campaign:
    """A campaign TOML file, or a built-in template by name."""
    path = Path(name_or_path)
    if not path.suffix:
        path = TEMPLATES / f"{name_or_path}.toml"
        if not path.is_file():
            raise ConfigError(f"no campaign template {name_or_path!r}; templates: "
                              f"{', '.join(templates())}, or pass a .toml file.")
    from advisor.core.files import TOML_LIMIT_BYTES, read_bounded

    raw = read_bounded(path, limit_bytes=TOML_LIMIT_BYTES, what="campaign TOML",
                       error=ConfigError)
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}).") from None
    except (tomllib.TOMLDecodeError, RecursionError) as e:
        raise ConfigError(f"{path}: not valid TOML ({str(e)[:200] or 'nested too deeply'})."
                          ) from None
    return campaign_from_dict(data, where=str(path))


def templates() -> list[str]:
    return sorted(p.stem for p in TEMPLATES.glob("*.toml"))


CAMPAIGN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A campaign name is a file name: no separators, no `..`, nothing absolute."""


def campaign_from_dict(data: dict, *, where: str = "campaign") -> Campaign:
    """Validate a parsed campaign; errors name the file and the key."""
    known = {"name", "platform", "device", "framework", "models", "sweep", "budget", "steps",
             "timing", "telemetry", "strategy"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: "
                          f"{', '.join(sorted(known))}.")
    for key in ("name", "platform", "models", "sweep"):
        if key not in data:
            raise ConfigError(f"{where}: missing {key!r} (see collectors/campaign.py).")
    name = data["name"]
    if not isinstance(name, str) or not CAMPAIGN_NAME.fullmatch(name):
        raise ConfigError(f"{where}: name {name!r} must be 1-64 letters, digits, '.', '_' or "
                          f"'-' starting with a letter or digit: it names the dataset "
                          f"(datasets/campaigns/<name>.parquet) and run directory "
                          f"(runs/<name>/), which must stay inside them.")
    if not isinstance(data["models"], list):
        raise ConfigError(f"{where}: models is a list of tables: write [[models]], not "
                          f"[models].")
    models = []
    for i, m in enumerate(data["models"]):
        if not isinstance(m, dict) or "name" not in m:
            raise ConfigError(f"{where}: models[{i}] needs a name (a catalog model).")
        _keys(m, {"name", "scale", "sweep"}, f"{where}: models[{i}]")
        scale = _ints(m.get("scale", {}), f"{where}: models[{i}].scale")
        models.append(CampaignModel(str(m["name"]), scale,
                                    _sweep(m.get("sweep", {}), f"{where}: models[{i}].sweep")))
    sweep = _sweep(data["sweep"], f"{where}: [sweep]")
    tables = {name: data.get(name, {}) for name in TABLE_KEYS}
    for name, allowed in TABLE_KEYS.items():
        _keys(tables[name], allowed, f"{where}: [{name}]")
    budget, steps, timing = tables["budget"], tables["steps"], tables["timing"]
    telemetry, strategy = tables["telemetry"], tables["strategy"]
    try:
        return _build(data, models, sweep, budget, steps, timing, telemetry, strategy, where)
    except (TypeError, ValueError, OverflowError) as e:
        raise ConfigError(f"{where}: a value has the wrong type ({e}); numbers are TOML "
                          f"numbers, names are strings.") from None


def _build(data, models, sweep, budget, steps, timing, telemetry, strategy, where) -> Campaign:
    campaign = Campaign(
        name=str(data["name"]), platform=str(data["platform"]), models=tuple(models),
        sweep=sweep, device=str(data.get("device", "cpu")),
        max_runs=_opt(budget, "runs", int), max_gpu_hours=_opt(budget, "gpu_hours", float),
        warmup_steps=int(steps.get("warmup", 2)), measure_steps=int(steps.get("measure", 3)),
        cooldown_s=float(timing.get("cooldown_s", 0.0)),
        timeout_s=float(timing.get("timeout_s", 600.0)),
        telemetry=str(telemetry.get("kind", "auto")), telemetry_hz=float(telemetry.get("hz", 20)),
        strategy=str(strategy.get("kind", "active")), seed=int(strategy.get("seed", 0)),
        framework=str(data.get("framework", "pytorch")), path=where)
    _check(campaign, where)
    return campaign


MOST_STEPS = 100_000
"""Warm-up or measured steps of one run: a measurement needs tens."""
MOST_RUNS = 1_000_000
MOST_SECONDS = 7 * 24 * 3600
"""A run's timeout or cool-down: a week."""
TABLE_KEYS = {"budget": {"runs", "gpu_hours"}, "steps": {"warmup", "measure"},
              "timing": {"cooldown_s", "timeout_s"}, "telemetry": {"kind", "hz"},
              "strategy": {"kind", "seed"}}
TELEMETRY_KINDS = ("auto", "nvml", "amdsmi", "cpu", "none")
_CHOICES = {"recompute": RECOMPUTE, "dp_sharding": DP_SHARDING, "precision": tuple(PRECISIONS),
            "overlap": (True, False), "ep_comm_overlap": (True, False),
            "moe_dispatcher": MOE_DISPATCHERS}


def _keys(table: dict, allowed: set[str], where: str) -> None:
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table.")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: "
                          f"{', '.join(sorted(allowed))}.")


def _ints(table: dict, where: str) -> dict[str, int]:
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table of name = whole number, got "
                          f"{shown_value(table)}.")
    out = {}
    for key, value in table.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{where}: {key} must be a positive whole number, got {value!r}.")
        out[key] = value
    return out


def _sweep(table: dict, where: str) -> dict[str, tuple]:
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table of knob = [values], got "
                          f"{shown_value(table)}.")
    out = {}
    for knob, values in table.items():
        if knob not in SWEEP_KNOBS:
            raise ConfigError(f"{where} {knob} is not a knob; use {', '.join(SWEEP_KNOBS)}.")
        values = values if isinstance(values, list) else [values]
        if not values:
            raise ConfigError(f"{where} {knob} has no values.")
        allowed = _CHOICES.get(knob)
        for value in values:
            ok = (value in allowed and type(value) is type(allowed[0])) if allowed else (
                isinstance(value, int) and not isinstance(value, bool) and value >= 1)
            if not ok:
                expected = (", ".join(map(str, allowed)).lower() if allowed
                            else "positive whole numbers")
                raise ConfigError(f"{where} {knob} = {value!r} is not allowed; use "
                                  f"{expected}.")
        out[knob] = tuple(values)
    return out


def _opt(table: dict, key: str, kind: type):
    return kind(table[key]) if key in table else None


def _check(c: Campaign, where: str) -> None:
    if c.device not in DEVICES:
        raise ConfigError(f"{where}: device {c.device!r}; use {' or '.join(DEVICES)}.")
    if c.framework not in FRAMEWORKS:
        raise ConfigError(f"{where}: framework {c.framework!r}; use {', '.join(FRAMEWORKS)}.")
    if c.framework != "pytorch" and c.device != "cuda":
        raise ConfigError(f"{where}: framework {c.framework} trains on GPUs: set device = "
                          f'"cuda" (CPU campaigns use framework "pytorch").')
    if c.strategy not in STRATEGIES:
        raise ConfigError(f"{where}: [strategy] kind {c.strategy!r}; use "
                          f"{' or '.join(STRATEGIES)}.")
    if not (1 <= c.measure_steps <= MOST_STEPS and 0 <= c.warmup_steps <= MOST_STEPS):
        raise ConfigError(f"{where}: [steps] needs measure in 1..{MOST_STEPS:,} and warmup in "
                          f"0..{MOST_STEPS:,}.")
    if c.max_runs is not None and not 1 <= c.max_runs <= MOST_RUNS:
        raise ConfigError(f"{where}: [budget] runs must be in 1..{MOST_RUNS:,}.")
    if c.max_gpu_hours is not None and not 0 < c.max_gpu_hours < math.inf:
        raise ConfigError(f"{where}: [budget] gpu_hours must be a positive finite number.")
    if not 0 <= c.seed < 2**63:
        raise ConfigError(f"{where}: [strategy] seed must be a whole number in 0..2**63-1.")
    if not (0 < c.timeout_s <= MOST_SECONDS and 0 <= c.cooldown_s <= MOST_SECONDS):
        raise ConfigError(f"{where}: [timing] timeout_s must be in (0, {MOST_SECONDS:,}] s "
                          f"and cooldown_s in [0, {MOST_SECONDS:,}] s (a week).")
    if c.telemetry not in TELEMETRY_KINDS and not c.telemetry.startswith("replay:"):
        raise ConfigError(f"{where}: [telemetry] kind {c.telemetry!r}; use "
                          f"{', '.join(TELEMETRY_KINDS)} or replay:PATH.")
    if not 1 <= c.telemetry_hz <= 100:
        raise ConfigError(f"{where}: [telemetry] hz must be within 1..100 (default 20).")


IDENTITY_LEAVES_OUT = ("path", "max_runs", "max_gpu_hours", "timeout_s", "strategy", "seed")
"""Campaign fields that do not change what a row means, so changing them continues the same
campaign: where the file lies, the budgets (how many runs), the time limit (a run that finishes
under either measures the same) and the strategy (which runs come first)."""


_TOML_PATHS = {"warmup_steps": ("steps", "warmup"), "measure_steps": ("steps", "measure"),
               "cooldown_s": ("timing", "cooldown_s"), "telemetry": ("telemetry", "kind"),
               "telemetry_hz": ("telemetry", "hz")}
"""Where a Campaign field lives in the file (the others under their own name)."""


def identity(campaign: Campaign) -> dict:
    """The normalized campaign as plain JSON values, laid out as the file is: what its rows
    mean (every field but IDENTITY_LEAVES_OUT), after defaults are filled in and whitespace,
    comments and key order are gone."""
    out: dict = {}
    for f in fields(campaign):
        if f.name in IDENTITY_LEAVES_OUT:
            continue
        *tables, key = _TOML_PATHS.get(f.name, (f.name,))
        table = out
        for name in tables:
            table = table.setdefault(name, {})
        table[key] = _plain(getattr(campaign, f.name))
    return out


def campaign_hash(campaign: Campaign) -> str:
    """SHA-256 of `identity(campaign)`: equal for two files that define the same runs."""
    text = json.dumps(identity(campaign), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def differences(old: dict, new: dict, *, most: int = 3) -> list[str]:
    """The first `most` leaves that differ between two identities, as `key: old -> new`."""
    flat_old, flat_new = _flat(old), _flat(new)
    keys = sorted(set(flat_old) | set(flat_new))
    changed = [k for k in keys if flat_old.get(k, "absent") != flat_new.get(k, "absent")]
    return [f"{k}: {_shown(flat_old.get(k))} -> {_shown(flat_new.get(k))}"
            for k in changed[:most]] + ([f"{len(changed) - most} more"]
                                        if len(changed) > most else [])


def _plain(value):
    if isinstance(value, CampaignModel):
        return {"name": value.name, "scale": dict(value.scale),
                "sweep": {k: list(v) for k, v in value.sweep.items()}}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def _flat(value, prefix: str = "") -> dict[str, object]:
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list) and any(isinstance(v, dict) for v in value):
        out = {}
        for i, item in enumerate(value):
            out.update(_flat(item, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


def _shown(value) -> str:
    return "(absent)" if value is None else json.dumps(value)
