"""Platform and model catalogs: TOML files in this package, cluster override files, and
Hugging Face `config.json` files, resolved by name, alias or path."""

from __future__ import annotations

import dataclasses
import functools
import os
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from advisor.core.errors import (
    AdvisorError,
    CatalogError,
    UnknownNameError,
    shown,
    shown_value,
    suggest,
)
from advisor.core.limits import check_name
from advisor.core.model import MODEL_FIELDS, ModelSpec
from advisor.core.platform import Platform, check_keys, check_sources, platform_from_dict

_ROOT = resources.files("advisor.catalog")

#: Model keys whose values are architecture facts covered by the `architecture` source.
_PUBLISHED_KEYS = ("published_total_params", "published_active_params", "rope_theta")


def read_toml(path: Path) -> dict[str, Any]:
    from advisor.core.files import TOML_LIMIT_BYTES, read_bounded

    data = read_bounded(path, limit_bytes=TOML_LIMIT_BYTES, what="TOML", error=CatalogError)
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise CatalogError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}).") from None
    except (tomllib.TOMLDecodeError, RecursionError) as e:
        raise CatalogError(f"{path}: not valid TOML ({str(e)[:200] or 'nested too deeply'})."
                           ) from None


# ---- platforms ----------------------------------------------------------------------------
@functools.cache
def platforms() -> dict[str, Platform]:
    """Every catalog platform by name."""
    out = {}
    for entry in sorted(_ROOT.joinpath("platforms").iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".toml"):
            path = Path(str(entry))
            p = platform_from_dict(read_toml(path), path=path)
            out[p.name] = p
    return out


def _platform_index() -> dict[str, str]:
    index = {}
    for p in platforms().values():
        for key in (p.name, *p.aliases):
            index[key.lower()] = p.name
    return index


def load_platform(name_or_path: str) -> Platform:
    """A catalog platform by name or alias, or a cluster override TOML file (`base = "h200"`)."""
    check_name(name_or_path, "platform", error=UnknownNameError)
    if name_or_path.endswith(".toml") or "/" in name_or_path:
        return load_platform_override(Path(name_or_path))
    index = _platform_index()
    key = name_or_path.strip().lower()
    if key not in index:
        raise UnknownNameError(f"unknown platform {shown(name_or_path)}.{suggest(key, index)} "
                               f"Known: {', '.join(sorted(platforms()))}; or pass a cluster "
                               f"file (.toml) with base = \"<platform>\".")
    return platforms()[index[key]]


def load_platform_override(path: Path) -> Platform:
    """A cluster file: `base = "<platform>"` plus keys to replace, each with its source."""
    data = read_toml(path)
    base_name = data.get("base")
    if not isinstance(base_name, str) or base_name.strip().lower() not in _platform_index():
        raise CatalogError(f"{path}: a cluster file needs base = \"<platform>\", a catalog "
                           f"platform (one of {', '.join(sorted(platforms()))}); got "
                           f"{shown_value(base_name)}.")
    base = load_platform(base_name)
    check_keys(data, str(path))
    check_sources(data, str(path))
    if "chassis" in data and data["chassis"] not in chassis_names():
        raise CatalogError(f"{path}: chassis {shown_value(data['chassis'])} is unknown; use one "
                           f"of {', '.join(chassis_names())} (advisor/catalog/chassis.toml).")
    for key, kind in (("peak_flops_per_s", dict), ("name", str), ("display_name", str)):
        if key in data and not isinstance(data[key], kind):
            raise CatalogError(f"{path}: {key} must be a "
                               f"{'table' if kind is dict else 'string'}, got "
                               f"{shown_value(data[key])}.")
    merged = {k: v for k, v in base.to_dict().items() if v is not None}
    merged["sources"] = dict(base.sources)
    for key, value in data.items():
        if key == "sources":
            merged["sources"].update(value)
        elif key == "peak_flops_per_s":
            merged[key] = {**merged[key], **value}
        elif key != "base":
            merged[key] = value
    if "num_nics_per_node" in data and "inter_node_bandwidth_bytes_per_s" not in data:
        merged.pop("inter_node_bandwidth_bytes_per_s", None)   # derived from the NICs
    if "tdp_w" in data and "min_power_limit_w" not in data:
        merged.pop("min_power_limit_w", None)   # the base board's minimum, not this one's
    merged["name"] = str(data.get("name", path.stem)).lower()
    merged["aliases"] = data.get("aliases", [])
    if "chassis" not in merged and base.name in chassis_of_platforms():
        merged["chassis"] = chassis_of_platforms()[base.name]   # the base's, under a new name
    for key in data:
        if key not in ("sources", "base", "name", "display_name", "aliases", "cooling",
                       "vendor", "device_unit", "peak_flops_per_s", "chassis") \
                and key not in data.get("sources", {}):
            raise CatalogError(f"{path}: {key} overrides {base.name} but has no entry in "
                               f"[sources]; say where the cluster's value comes from.")
    return platform_from_dict(merged, path=path)


CONDITIONS = ("power_limit_w", "inlet_c", "degraded_nodes", "degraded_power_w",
              "electricity_usd_per_kwh", "gpu_hour_usd")
"""The platform keys that describe where and how a job runs rather than the hardware: the
command line (`--power-limit-w`, `--inlet-c`, `--degraded-nodes`, `--degraded-power-w`,
`--electricity-price`, `--gpu-hour-price`), a cluster file or an input CSV's columns set
them."""


def with_conditions(platform: Platform, *, given_by: str = "the command line",
                    **conditions: float | int | None) -> Platform:
    """`platform` with the `CONDITIONS` that are not None, checked by the same rules as a
    cluster file (`given_by` becomes their source)."""
    unknown = set(conditions) - set(CONDITIONS)
    if unknown:
        raise TypeError(f"unknown condition(s): {', '.join(sorted(unknown))}")
    return with_fields(platform, given_by=given_by, **conditions)


OVERRIDABLE = tuple(sorted({f.name for f in dataclasses.fields(Platform)}
                           - {"name", "display_name", "aliases", "sources", "path", "vendor",
                              "family", "device_unit", "peak_flops_per_s"}))
"""Platform keys a row of the Predictor's frame may override (a cluster file's, by column)."""


def with_fields(platform: Platform, *, given_by: str, **fields) -> Platform:
    """`platform` with the fields that are not None replaced, checked by the same rules as a
    cluster file (`given_by` becomes their source); the conditions and any other platform key
    a cluster file may set."""
    changes = {k: v for k, v in fields.items() if v is not None}
    if not changes:
        return platform
    merged = {k: v for k, v in platform.to_dict().items() if v is not None}
    nics = "num_nics_per_node" in merged or "num_nics_per_node" in changes
    if nics and "inter_node_bandwidth_bytes_per_s" not in changes:   # derived from the NICs
        merged.pop("inter_node_bandwidth_bytes_per_s", None)
    if "tdp_w" in changes and "min_power_limit_w" not in changes:
        merged.pop("min_power_limit_w", None)   # the base board's minimum, not this one's
    merged.update(changes)
    merged["sources"] = {**platform.sources, **{k: given_by for k in changes}}
    return platform_from_dict(merged, path=Path(given_by))


@functools.cache
def chassis_names() -> tuple[str, ...]:
    """The chassis `advisor/catalog/chassis.toml` describes (`perf.thermal` reads them)."""
    return tuple(sorted(_chassis_tables()))


@functools.cache
def chassis_of_platforms() -> dict[str, str]:
    """Catalog platform name -> the chassis that lists it (`platforms = [...]`)."""
    return {platform: name for name, table in _chassis_tables().items()
            for platform in table.get("platforms", ())}


@functools.cache
def _chassis_tables() -> dict[str, dict]:
    return read_toml(Path(str(_ROOT.joinpath("chassis.toml"))))["chassis"]


# ---- models -------------------------------------------------------------------------------
@functools.cache
def models() -> dict[str, ModelSpec]:
    """Every catalog model by name."""
    return {name: _model(name) for name in _model_tables()}


@functools.cache
def _model_tables() -> dict[str, tuple[str, dict, Path]]:
    """Every catalog model's TOML table, by lower-case name: (name as written, table, file).
    Read, not yet checked: `load_model` builds (and checks) only the model it is asked for."""
    out: dict[str, tuple[str, dict, Path]] = {}
    for entry in sorted(_ROOT.joinpath("models").iterdir(), key=lambda p: p.name):
        if not entry.name.endswith(".toml"):
            continue
        path = Path(str(entry))
        table = read_toml(path).get("models")
        if not isinstance(table, dict) or not table:
            raise CatalogError(f"{path}: expected [models.<name>] tables.")
        for name, data in table.items():
            if name.lower() in out:
                raise CatalogError(f"{path}: model {name.lower()} is also defined in "
                                   f"{out[name.lower()][2]}.")
            out[name.lower()] = (name, data, path)
    return out


@functools.cache
def _model(name: str) -> ModelSpec:
    written, data, path = _model_tables()[name]
    return model_from_dict(data, name=written, path=path)


def model_from_dict(data: dict[str, Any], *, name: str, path: Path | str) -> ModelSpec:
    where = f"{path} [models.{name}]"
    unknown = set(data) - set(MODEL_FIELDS) - {"sources"}
    if unknown:
        raise CatalogError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; see "
                           f"advisor/catalog/SCHEMA.md for the model keys.")
    if not isinstance(data, dict):
        raise CatalogError(f"{where}: expected a table of model fields.")
    sources = data.get("sources", {})
    if not isinstance(sources, dict):
        raise CatalogError(f"{where}: [sources] must be a table of key = \"source\".")
    if not str(sources.get("architecture", "")).strip():
        raise CatalogError(f"{where}: [sources] needs an 'architecture' entry naming the "
                           f"config.json, recipe or paper the shape comes from.")
    for key in _PUBLISHED_KEYS:
        if key in data and not str(sources.get(key, "")).strip():
            raise CatalogError(f"{where}: {key} has no entry in [sources].")
    values: dict[str, Any] = {"name": name.lower(), "sources": dict(sources), "path": str(path)}
    for key, value in data.items():
        if key == "sources":
            continue
        field_type = str(MODEL_FIELDS[key].type)
        if key == "aliases":
            if not isinstance(value, list):
                raise CatalogError(f"{where}: aliases must be a list of strings.")
            values[key] = tuple(str(a).lower() for a in value)
        elif field_type == "bool":
            if not isinstance(value, bool):
                raise CatalogError(f"{where}: {key} must be true or false, got {value!r}.")
            values[key] = value
        elif field_type == "str":
            if not isinstance(value, str):
                raise CatalogError(f"{where}: {key} must be a string, got {value!r}.")
            values[key] = value
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise CatalogError(f"{where}: {key} must be a non-negative number, "
                                   f"got {value!r}.")
            if field_type == "int":
                if value != int(value):
                    raise CatalogError(f"{where}: {key} must be a whole number, got {value!r}.")
                value = int(value)
            values[key] = value
    missing = [k for k in ("num_layers", "hidden_size", "ffn_hidden_size",
                           "num_attention_heads", "num_kv_heads", "vocab_size", "max_seq_len")
               if k not in values]
    if missing:
        raise CatalogError(f"{where}: missing key(s) {', '.join(missing)}.")
    return ModelSpec(**values)


def _model_index() -> dict[str, str]:
    """Name, display name and aliases (lower case) → the model's name."""
    index: dict[str, str] = {}
    for name, (_, data, _) in _model_tables().items():
        aliases = data.get("aliases", []) if isinstance(data, dict) else None
        display = data.get("display_name", "") if isinstance(data, dict) else None
        if not isinstance(aliases, list) or not isinstance(display, str):
            _model(name)        # raises the CatalogError that says what is wrong
        for key in (name, display, *(str(a) for a in aliases)):
            if key:
                index[key.lower()] = name
    return index


SCALE_FIELDS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
                "num_kv_heads", "vocab_size", "head_dim", "max_seq_len")
"""Shape fields a scaled-down model may override (campaigns shrink models to fit a CPU)."""


def scaled_model_name(base: str, overrides: dict[str, int]) -> str:
    """`llama3-8b@hidden_size=64,num_layers=2`: a catalog model with its shape overridden; the
    name is canonical (sorted keys), so rows of one scaled model share it."""
    if not overrides:
        return base
    return base + "@" + ",".join(f"{k}={int(v)}" for k, v in sorted(overrides.items()))


def scaled_model(base: ModelSpec, overrides: dict[str, int]) -> ModelSpec:
    """`base` with shape fields replaced; derived and published counts no longer apply."""
    bad = sorted(set(overrides) - set(SCALE_FIELDS))
    if bad:
        raise CatalogError(f"cannot scale {', '.join(bad)} of {base.name}; scalable fields: "
                           f"{', '.join(SCALE_FIELDS)}.")
    if base.layer_pattern or base.is_moe or base.is_mla:
        raise CatalogError(f"{base.name}: only dense attention models can be scaled down "
                           f"(hybrid, MoE and MLA shapes have more fields than these).")
    values: dict[str, int] = {k: int(v) for k, v in overrides.items()}
    derived = dict(values)
    if {"hidden_size", "num_attention_heads"} & set(values) and "head_dim" not in values:
        derived["head_dim"] = 0  # derived again from the new width and heads (as the workload)
    return dataclasses.replace(
        base, name=scaled_model_name(base.name, values), display_name=
        f"{base.display_name or base.name} (scaled: {scaled_model_name('', values)[1:]})",
        published_total_params=0.0, published_active_params=0.0, path="", **derived)


def load_model(name_or_path: str) -> ModelSpec:
    """A catalog model by name, alias or reference-data spelling (case-insensitive), a scaled
    catalog model (`llama3-8b@num_layers=2,hidden_size=64`), or a Hugging Face `config.json`
    path."""
    check_name(name_or_path, "model", error=UnknownNameError)
    if "@" in name_or_path:
        base, _, spec = name_or_path.partition("@")
        overrides = {}
        for item in filter(None, spec.split(",")):
            key, sep, value = item.partition("=")
            if not sep or not (value.strip().isascii() and value.strip().isdigit()):
                raise CatalogError(f"{shown(name_or_path)}: scaled models are written "
                                   f"NAME@field=int,field=int (e.g. "
                                   f"llama3-8b@num_layers=2,hidden_size=64).")
            overrides[key.strip()] = int(value)
        return scaled_model(load_model(base), overrides)
    index = _model_index()
    key = name_or_path.strip().lower()
    if name_or_path.endswith(".json") or (key not in index and _exists(name_or_path)):
        from advisor.core.hf_config import model_from_hf_config

        return model_from_hf_config(Path(name_or_path))
    if key not in index and name_or_path.startswith(("/", "./", "../", "~")):
        raise CatalogError(f"{shown(name_or_path)}: no such file or directory; give a Hugging "
                           f"Face config.json (or the folder holding it) or a catalog model "
                           f"name (`advisor catalog models`).")
    if key not in index:
        raise UnknownNameError(f"unknown model {shown(name_or_path)}.{suggest(key, index)} "
                               f"See `advisor catalog models`, or pass a Hugging Face "
                               f"config.json path.")
    return _model(index[key])


def _exists(name: str) -> bool:
    """`name` is something on disk (a Hugging Face checkout, a config file, a link, a device);
    False for what cannot be a path."""
    try:
        return os.path.lexists(name)
    except (OSError, ValueError):   # a name too long for the file system, say
        return False


def find_model(name: str) -> ModelSpec | None:
    """Like `load_model` for catalog names, but None when unknown."""
    if "@" in str(name):
        try:
            return load_model(str(name))
        except AdvisorError:
            return None
    key = _model_index().get(str(name).strip().lower())
    return _model(key) if key else None
