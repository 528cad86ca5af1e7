"""Rows of a model given as a config.json, on a cluster file, keep their specification: they are
usable after the files moved, by the calibration, the features and `advisor train`."""

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor import catalog
from advisor.core.errors import CatalogError
from advisor.data.dataset import DatasetError, import_published, load
from advisor.data.dataset import append as append_rows
from advisor.data.row_specs import (
    model_from_spec,
    model_spec_text,
    platform_from_spec,
    platform_spec_text,
    row_model,
)
from advisor.learn.features import reference_features
from advisor.learn.fit import predict_reference, reference_from_frame
from advisor.perf.calibration import load_calibration

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def test_every_catalog_model_and_platform_round_trips_through_its_specification():
    for name, model in catalog.models().items():
        assert model_from_spec(model_spec_text(model)) == model, name
    scaled = catalog.load_model("llama3-8b@num_layers=2,hidden_size=64")
    assert model_from_spec(model_spec_text(scaled)) == scaled
    for platform in catalog.platforms().values():
        assert platform_from_spec(platform_spec_text(platform)) == platform, platform.name
    cluster = catalog.load_platform(str(FIXTURES / "clusters" / "paper-h200.toml"))
    assert platform_from_spec(platform_spec_text(cluster)) == cluster


def test_a_broken_specification_says_what_is_wrong():
    with pytest.raises(CatalogError, match="not valid JSON"):
        row_model({"model": "x", "model_spec": "{"})
    with pytest.raises(CatalogError, match="missing key"):
        row_model({"model": "x", "model_spec": '{"name": "x", "sources": '
                                               '{"architecture": "a"}}'})


def _own_runs(tmp_path: Path) -> tuple[Path, Path, Path, pd.DataFrame]:
    """NVIDIA's published Llama 3.1 405B runs on H100, written as a team would write its own:
    the model as its config.json, the platform as a cluster file."""
    config = tmp_path / "ours" / "llama-405b" / "config.json"
    config.parent.mkdir(parents=True)
    shutil.copy(FIXTURES / "hf_configs" / "llama3.1-405b.json", config)
    cluster = tmp_path / "ours" / "our-h100.toml"
    cluster.write_text('base = "h100"\nname = "our-h100"\nnum_nics_per_node = 8\n'
                       'nic_bandwidth_bytes_per_s = 50e9\n[sources]\n'
                       'num_nics_per_node = "DGX H100 datasheet: 8 ConnectX-7"\n'
                       'nic_bandwidth_bytes_per_s = "DGX H100 datasheet: 400 Gb/s per NIC"\n')
    published = load(ROOT / "datasets" / "published.parquet")
    runs = published[(published["model"] == "Llama3.1-405B") & (published["gpu"] == "h100")]
    assert len(runs) >= 3
    csv = tmp_path / "ours.csv"
    (runs.rename(columns={"source_ref": "source_url"})
     .assign(model=str(config), gpu=str(cluster)).to_csv(csv, index=False))
    return csv, config, cluster, runs


def test_own_model_and_cluster_survive_import_and_the_files_moving(tmp_path):
    csv, config, cluster, runs = _own_runs(tmp_path)
    rows = import_published(csv)
    assert rows["model_spec"].str.contains('"num_layers": 126').all()
    assert rows["platform_spec"].str.contains('"num_nics_per_node": 8').all()
    dataset = tmp_path / "ours.parquet"
    append_rows(dataset, rows)
    shutil.rmtree(tmp_path / "ours")        # the files are gone; the rows still say it all
    ref = reference_from_frame(load(dataset))
    assert ref.skipped.empty and len(ref.rows) == len(runs)
    assert set(ref.rows["model"]) == {"llama-405b"} and set(ref.rows["platform"]) == {"our-h100"}

    catalog_ref = reference_from_frame(runs)
    ours = predict_reference(ref, load_calibration()).to_numpy()
    same = predict_reference(catalog_ref, load_calibration()).to_numpy()
    assert np.allclose(ours, same, rtol=0.02)   # the same model; 8 x 400 Gb/s as the catalog
    feats = reference_features(ref, load_calibration())
    assert np.isfinite(feats["analytical"]).all() and len(feats) == len(runs)


def test_a_model_file_that_cannot_be_read_stops_the_import_with_its_row(tmp_path):
    csv, config, _, _ = _own_runs(tmp_path)
    config.unlink()
    with pytest.raises(DatasetError, match=r"row 2 .*no such file"):
        import_published(csv)
