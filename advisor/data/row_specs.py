"""A dataset row's model and platform as objects, wherever the row is read.

A row names its model and platform (`model`, `gpu`): a catalog name, a scaled catalog model
(`llama3-8b@num_layers=2`), a Hugging Face `config.json` path or a cluster file. A path means
nothing on another machine, or after the file moved or changed, so a row whose model or
platform is not in the catalog also carries its full specification as JSON (`model_spec`,
`platform_spec`), written when the row is made (`advisor collect`, `dataset import-published`)
and read first by `advisor train`, `evaluate` and the calibration. Catalog rows leave both
empty: the catalog is their specification.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from advisor.core.errors import CatalogError
from advisor.core.model import ModelSpec
from advisor.core.platform import Platform, platform_from_dict

MODEL_SPEC, PLATFORM_SPEC = "model_spec", "platform_spec"
_MODEL_DEFAULTS = {f.name: f.default if f.default is not dataclasses.MISSING
                   else f.default_factory()  # type: ignore[misc]
                   for f in dataclasses.fields(ModelSpec)
                   if f.default is not dataclasses.MISSING
                   or f.default_factory is not dataclasses.MISSING}


def model_spec_text(model: ModelSpec) -> str:
    """The model as JSON: its name and every field that differs from `ModelSpec`'s default
    (what `model_from_dict` reads back into an equal model). A field the catalog wants a source
    for and a config.json gave none (its rope_theta) cites the file it was read from."""
    fields = {f.name: getattr(model, f.name) for f in dataclasses.fields(model)
              if f.name not in ("name", "path")
              and (f.name not in _MODEL_DEFAULTS
                   or getattr(model, f.name) != _MODEL_DEFAULTS[f.name])}
    sources = dict(fields.get("sources", {}))
    for key in ("published_total_params", "published_active_params", "rope_theta"):
        if key in fields and not str(sources.get(key, "")).strip():
            sources[key] = sources.get("architecture", "")
    fields["sources"] = sources
    return json.dumps({"name": model.name, **fields}, sort_keys=True)


def platform_spec_text(platform: Platform) -> str:
    """The platform (a cluster file's merged fields, sources included) as JSON."""
    fields = {k: v for k, v in platform.to_dict().items() if v is not None}
    return json.dumps(fields, sort_keys=True)


def model_from_spec(text: str, *, where: str = MODEL_SPEC) -> ModelSpec:
    from advisor.catalog import model_from_dict

    data = _object(text, where)
    name = data.pop("name", "")
    if not isinstance(name, str) or not name:
        raise CatalogError(f"{where}: the model specification has no name.")
    return model_from_dict(data, name=name, path=where)


def platform_from_spec(text: str, *, where: str = PLATFORM_SPEC) -> Platform:
    return platform_from_dict(_object(text, where), path=Path(where))


def spec_columns(model: str, gpu: str) -> dict[str, str | None]:
    """`model_spec` and `platform_spec` for a row naming `model` and `gpu`: the JSON of a
    config.json or cluster file the row names (an unreadable one raises its `CatalogError`);
    None for catalog names, scaled catalog models (their name is their specification) and
    names the catalog does not know (the row is skipped, with the reason, where it is used)."""
    from advisor.catalog import find_model, load_model, load_platform

    model_text = None
    if find_model(model) is None and is_model_file(model):
        model_text = model_spec_text(load_model(model))
    platform_text = platform_spec_text(load_platform(gpu)) if is_cluster_file(gpu) else None
    return {MODEL_SPEC: model_text, PLATFORM_SPEC: platform_text}


def is_model_file(model: str) -> bool:
    """Whether a row's `model` names a config.json (or its folder) rather than a catalog
    model, as `load_model` tells them apart."""
    import os

    if model.endswith(".json") or model.startswith(("/", "./", "../", "~")):
        return True
    try:
        return os.path.lexists(model)
    except (OSError, ValueError):   # a name too long for the file system, say
        return False


def is_cluster_file(gpu: str) -> bool:
    """Whether a row's `gpu` names a cluster file rather than a catalog platform (as
    `load_platform` tells them apart)."""
    return gpu.endswith(".toml") or "/" in gpu


def row_model(row: Any) -> ModelSpec:
    """The model of a dataset row: its `model_spec` where it carries one, else its `model`."""
    from advisor.catalog import load_model

    text = str(_get(row, MODEL_SPEC)).strip()
    return model_from_spec(text, where=f"{MODEL_SPEC} of {_get(row, 'model')}") if text \
        else load_model(str(row["model"]))


def row_platform(row: Any) -> Platform:
    """The platform of a dataset row: its `platform_spec` where it carries one, else `gpu`."""
    from advisor.catalog import load_platform

    text = str(_get(row, PLATFORM_SPEC)).strip()
    return platform_from_spec(text, where=f"{PLATFORM_SPEC} of {_get(row, 'gpu')}") if text \
        else load_platform(str(row["gpu"]))


def spec_key(name: str, text: str) -> str:
    """A key that tells two specifications under one name apart (`name#<hash>`; the name alone
    where the row carries none)."""
    text = text.strip()
    return f"{name}#{hashlib.sha256(text.encode()).hexdigest()[:12]}" if text else name


def _get(row: Any, key: str) -> Any:
    value = row.get(key, "") if hasattr(row, "get") else ""
    try:
        return "" if value is None or value != value else value    # None, NaN
    except TypeError:       # pandas' NA has no truth value
        return ""


def _object(text: str, where: str) -> dict:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError, ValueError) as e:
        raise CatalogError(f"{where}: not valid JSON ({str(e)[:100]}).") from None
    if not isinstance(data, dict):
        raise CatalogError(f"{where}: expected a JSON object of fields.")
    return data
