"""Surrogates trained for real (XGBoost on the published runs), their artifacts, the Predictor
and grouped cross-validation."""

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor import catalog
from advisor.core.parallel import make_config, make_job
from advisor.learn.evaluate import cross_validate, summarise
from advisor.learn.features import FEATURES, release_number
from advisor.learn.surrogate import (
    ArtifactError,
    load_throughput,
    train_throughput,
    write_metadata,
)
from advisor.learn.train import train
from advisor.perf.calibration import load_calibration
from advisor.predict.predictor import Predictor, bundled_models_dir


def test_features_are_finite_where_known(feats):
    assert list(feats.columns[:len(FEATURES)]) == list(FEATURES)
    known = feats[list(FEATURES)].drop(columns="release")
    assert np.isfinite(known.to_numpy()).all()
    assert release_number("26.04.01") == pytest.approx(26.0401)
    assert np.isnan(release_number(""))


@pytest.mark.slow
def test_surrogate_learns_the_residual_and_is_reproducible(ref, feats):
    fam, mfam = ref.rows["family"].to_numpy(), ref.rows["model_family"].to_numpy()
    one = train_throughput(feats, fam, mfam, seed=0)
    two = train_throughput(feats, fam, mfam, seed=0)
    r1, r2 = one.predict_ratio(feats, fam, mfam), two.predict_ratio(feats, fam, mfam)
    assert np.allclose(r1["p50"], r2["p50"])
    surrogate_ape = (feats["analytical"] * r1["p50"] / feats["measured"] - 1).abs()
    analytical_ape = (feats["analytical"] / feats["measured"] - 1).abs()
    assert surrogate_ape.mean() < 0.6 * analytical_ape.mean()
    assert (r1["p10"] <= r1["p50"]).all() and (r1["p50"] <= r1["p90"]).all()


@pytest.mark.slow
def test_band_widens_and_flags_outside_the_data(ref, feats):
    fam, mfam = ref.rows["family"].to_numpy(), ref.rows["model_family"].to_numpy()
    s = train_throughput(feats, fam, mfam)
    far = feats.iloc[:20].copy()
    far["log2_gpus"] = feats["log2_gpus"].max() + 3  # far beyond the largest measured job
    inside = s.predict_ratio(feats.iloc[:20], fam[:20], mfam[:20])
    outside = s.predict_ratio(far, fam[:20], mfam[:20])
    assert outside["extrapolation"].all() and not inside["extrapolation"].any()
    width_in = np.log(inside["p90"] / inside["p10"])
    width_out = np.log(outside["p90"] / outside["p10"])
    assert (width_out > width_in).mean() > 0.5
    unseen = s.predict_ratio(feats.iloc[:5], np.array(["cdna2"] * 5), mfam[:5])
    assert not unseen["supported"].any()


def test_artifacts_round_trip_and_refuse_damage(ref, feats, tmp_path):
    fam, mfam = ref.rows["family"].to_numpy(), ref.rows["model_family"].to_numpy()
    s = train_throughput(feats, fam, mfam)
    s.save(tmp_path)
    back = load_throughput(tmp_path)
    assert np.allclose(back.predict_ratio(feats, fam, mfam)["p50"],
                       s.predict_ratio(feats, fam, mfam)["p50"])
    meta = json.loads((tmp_path / "throughput.json").read_text())
    assert meta["features"] == list(FEATURES) and "xgboost" in meta["versions"]
    # altered model bytes
    damaged = tmp_path / "damaged"
    shutil.copytree(tmp_path, damaged, ignore=shutil.ignore_patterns("damaged"))
    blob = bytearray((damaged / "throughput.model.json").read_bytes())
    blob[100] ^= 0xFF
    (damaged / "throughput.model.json").write_bytes(bytes(blob))
    with pytest.raises(ArtifactError, match="does not match its metadata"):
        load_throughput(damaged)
    # metadata from another version
    meta["format_version"] = 999
    write_metadata(damaged / "throughput.json", meta)
    with pytest.raises(ArtifactError, match="another advisor version"):
        load_throughput(damaged)
    (damaged / "throughput.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="not valid JSON"):
        load_throughput(damaged)
    with pytest.raises(ArtifactError, match="missing"):
        load_throughput(tmp_path / "nowhere")


@pytest.mark.slow
def test_train_writes_what_ships(tmp_path, reference_csv, mlperf_csv):
    from advisor.data.dataset import append, import_mlperf, import_published

    data, mlperf = tmp_path / "published.parquet", tmp_path / "mlperf.parquet"
    append(data, import_published(reference_csv))
    append(mlperf, import_mlperf(mlperf_csv)[0])
    report = train([data, mlperf], tmp_path / "models", seed=0)
    assert report.rows_used > 500
    assert any(k.startswith("LoRA fine-tuning") for k in report.skipped_reasons)
    assert report.targets["avg_power_w"].startswith("no data")
    fresh = load_throughput(tmp_path / "models")
    assert fresh.metadata["data_sha256"] == report.data_sha256
    bundled = json.loads((bundled_models_dir() / "throughput.json").read_text())
    assert bundled["data_sha256"] == report.data_sha256  # models/ was built from this data
    assert bundled["model_sha256"] == fresh.metadata["model_sha256"]  # ... reproducibly


def test_predictor_predicts_frames_and_pairs():
    p = Predictor.load()
    model, h100, mi300x = (catalog.load_model("llama3-70b"), catalog.load_platform("h100"),
                           catalog.load_platform("mi300x"))
    job = make_job(model, h100, num_gpus=64, seq_len=8192, gbs=128)
    pairs = [(make_config(job, tp=4, pp=2), job), (make_config(job, tp=8), job)]
    out = p.predict(pairs)
    assert (out["pred_source"] == "surrogate").all()
    assert (out["pred_tokens_per_sec_per_gpu_p10"] <= out["pred_tokens_per_sec_per_gpu"]).all()
    amd_job = make_job(model, mi300x, num_gpus=64, seq_len=8192, gbs=128)
    amd = p.predict([(make_config(amd_job, tp=4), amd_job)])
    assert amd["pred_source"].iloc[0] == "analytical" and amd["pred_extrapolation"].iloc[0]
    assert amd["pred_tokens_per_sec_per_gpu_p90"].iloc[0] > amd[
        "pred_tokens_per_sec_per_gpu"].iloc[0]
    frame = pd.DataFrame([make_config(job, tp=4, pp=2).to_dict() | {"model": "nope",
                                                                     "gpu": "h100"}])
    bad = p.predict(frame)
    assert "unknown model" in bad["pred_error"].iloc[0]


@pytest.mark.slow
def test_grouped_cross_validation_on_held_out_platforms_is_no_worse_than_the_prior(ref):
    """Leave-one-platform-out without refitting the prior (fast); the full, refitted table is
    `advisor evaluate`. Measured 2026-12-04 (prior with the expected losses): surrogate 11.24 %
    against the prior's 11.25 % MAPE, a tie; it wins on Ampere (4.2 vs 4.9 %) and Hopper
    (9.0 vs 9.5 %) and still loses on Blackwell (16.9 vs 16.2 %): corrections learned on
    B200/B300 transfer badly to Grace-Blackwell. (From 2026-12-02, when the calibration took in
    the MLPerf rows, to this commit the surrogate lost, 11.4 against 11.2 %.)"""
    result = cross_validate(ref, load_calibration(), "platform", refit_analytical=False)
    s = summarise(ref, result)
    assert s["rows"] == len(ref.rows)
    assert 0 < s["supported_share"] < 1
    assert s["surrogate"]["mape_pct"] < s["analytical"]["mape_pct"] + 0.5
    assert 0.4 < s["surrogate"]["p10_p90_coverage"] <= 1.0


@pytest.mark.slow
def test_mlperf_rounds_are_held_out_one_at_a_time_and_only_they_are_scored(ref):
    """Every MLPerf row is predicted by models trained without its round (and with every
    published row); the published rows are never held out, so they are not scored."""
    from advisor.learn.evaluate import SPLITS

    result = cross_validate(ref, load_calibration(), SPLITS["mlperf_round"],
                            refit_analytical=False)
    mlperf = ref.rows[ref.rows["round"] != ""]
    assert sorted(result.index) == sorted(mlperf.index)
    assert set(result["group"]) == {"v3.1", "v4.0", "v4.1", "v5.0"}
    assert (result["group"] == mlperf.loc[result.index, "round"]).all()
    s = summarise(ref, result)
    assert s["rows"] == len(mlperf)
    families = s["analytical"]["by_family"]
    assert {"hopper", "blackwell", "cdna3"} <= set(families)
    assert sum(f["rows"] for f in families.values()) == len(mlperf)
    assert set(mlperf["submitter"]) >= {"NVIDIA", "AMD", "Dell", "MangoBoost"}


def test_bundled_models_dir_is_the_checkout_models():
    assert bundled_models_dir() == Path(__file__).resolve().parents[2] / "models"


def test_predictor_is_importable_from_advisor_and_cheap_to_import():
    import subprocess
    import sys

    code = ("import sys, time; t = time.perf_counter(); import advisor; "
            "print(time.perf_counter() - t); "
            "assert 'xgboost' not in sys.modules and 'torch' not in sys.modules; "
            "from advisor import Predictor; assert Predictor.__name__ == 'Predictor'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert float(out.stdout.splitlines()[0]) < 0.5


def test_gavel_throughput_table_and_pollux_speedup():
    from advisor.search.scheduling import SpeedupFunction, throughput_table

    p = Predictor.load()
    table = throughput_table(p, "llama3-8b", ["h100", "mi300x"], [8, 16])
    assert list(table["platform"]) == ["h100", "h100", "mi300x", "mi300x"]
    assert (table["tokens_per_sec"] > 0).all()
    h100 = table[table["platform"] == "h100"]
    assert h100["tokens_per_sec"].iloc[1] > h100["tokens_per_sec"].iloc[0]  # more GPUs, more
    assert set(table["source"]) == {"surrogate", "analytical"}  # AMD rests on the prior
    speedup = SpeedupFunction(p, "llama3-8b", "h100")
    s = speedup(np.array([1, 2, 2]), np.array([1, 2, 4]))
    assert s.shape == (3,) and s[0] == pytest.approx(1.0)
    assert s[1] > 1.5  # two nodes, two replicas: nearly twice one node
    assert speedup(1, 3) == 0.0  # 8 GPUs cannot hold 3 equal replicas


@pytest.mark.slow
def test_vtrain_leave_one_job_out_ranks_layouts(vtrain_dir):
    """On the 8-GPU jobs only (to stay quick): held-out jobs predicted from the others."""
    from advisor.learn.evaluate import vtrain_leave_one_job_out
    from advisor.perf.vtrain import load_vtrain, score_vtrain

    frame = load_vtrain(vtrain_dir / "ground_truth_single.csv")
    frame = frame[frame["num_gpus"] == 8]
    result = vtrain_leave_one_job_out(frame)
    surrogate, _ = score_vtrain(frame, result["surrogate_ms"])
    analytical, _ = score_vtrain(frame, result["analytical_ms"])
    assert surrogate.mape_pct < analytical.mape_pct
    assert surrogate.median_kendall_tau > 0.8
    assert surrogate.mean_top1_regret_pct <= analytical.mean_top1_regret_pct


def test_predictor_derives_dp_from_num_gpus_and_refuses_contradictions():
    # A frame with num_gpus and no dp is a 64-GPU job, not dp 1 on 8 GPUs; a dp that
    # contradicts num_gpus, or a job of another size than the config's, is a row error.
    p = Predictor.load()
    row = {"model": "llama3-70b", "gpu": "h200", "tp": 4, "pp": 2, "seq_len": 8192,
           "gbs": 128, "mbs": 1}
    frame = pd.DataFrame([row | {"num_gpus": 64}, row | {"dp": 8}, row | {"num_gpus": 64, "dp": 4},
                          row | {"num_gpus": 60}, row])
    out = p.predict(frame)
    assert (out["pred_error"].iloc[:2] == "").all()
    assert out["pred_step_time_s"].iloc[0] == pytest.approx(out["pred_step_time_s"].iloc[1])
    assert "the job has 64 GPUs; set dp = 8" in out["pred_error"].iloc[2]
    assert "must divide the job's 60 GPUs" in out["pred_error"].iloc[3]
    assert "num_gpus and dp are both empty" in out["pred_error"].iloc[4]
    model, h200 = catalog.load_model("llama3-70b"), catalog.load_platform("h200")
    job64 = make_job(model, h200, num_gpus=64, seq_len=8192, gbs=128)
    job32 = make_job(model, h200, num_gpus=32, seq_len=8192, gbs=128)
    config = make_config(job64, tp=4, pp=2)
    pairs = p.predict([(config, job64), (config, job32)])
    assert pairs["pred_error"].iloc[0] == ""
    assert "the job has 32 GPUs" in pairs["pred_error"].iloc[1]


@pytest.mark.parametrize("row", [
    # Current Megatron-Core (no release named): overlap, SP, flash attention, BF16 grads.
    {"model": "llama3-70b", "gpu": "h200", "num_gpus": 64, "tp": 4, "pp": 2, "seq_len": 8192,
     "gbs": 128, "mbs": 1, "recompute": "selective"},
    # A 2021 release: no overlap, FP32 gradient reduce, unfused attention.
    {"model": "llama3-70b", "gpu": "h200", "num_gpus": 64, "tp": 4, "pp": 2, "seq_len": 8192,
     "gbs": 128, "mbs": 1, "recompute": "selective", "software": "2021"},
    # MoE with etp unset: Megatron-Core's etp = tp.
    {"model": "mixtral-8x7b", "gpu": "h100", "num_gpus": 64, "tp": 2, "ep": 8, "seq_len": 4096,
     "gbs": 256, "mbs": 1, "recompute": "full"},
])
def test_predictor_takes_the_same_defaults_as_predict_input(row):
    """The same row through `Predictor.predict` and `predict --input` (both analytical here):
    the same prediction, and the assumptions said."""
    from advisor.predict.rows import predict_frame

    frame = pd.DataFrame([row]).astype({k: str for k in row if k == "software"})
    direct = Predictor(None).predict(frame).iloc[0]
    via_input = predict_frame(frame.astype(str)).iloc[0]
    assert direct["pred_error"] == "" and via_input["pred_error"] == ""
    assert direct["pred_tokens_per_sec_per_gpu"] == pytest.approx(
        via_input["pred_tokens_per_sec_per_gpu"], abs=0.05)  # predict --input rounds to 0.1
    assert direct["pred_memory_gb"] == pytest.approx(via_input["pred_memory_gb"], abs=0.01)
    assumed = direct["pred_assumed"]
    if "software" in row:
        assert "attention=unfused" in assumed and "2021-22 Megatron-LM" in assumed
    else:
        assert "overlap_grad_reduce=true" in assumed and "names no release" in assumed
    if row["model"] == "mixtral-8x7b":
        assert "etp=tp" in assumed and "etp=2" in via_input["pred_assumed"]


def test_edited_metadata_a_renamed_pickle_and_a_missing_bundle_are_refused(tmp_path,
                                                                          monkeypatch):
    """The metadata is inside the hash (a hand-edited band or support would change rankings
    silently); a pickle under an artifact's name is never unpickled; a missing bundled model
    is an error, not a silent fall-back to the analytical model."""
    import pickle
    import shutil

    from advisor.predict import predictor as predictor_module
    from advisor.predict.predictor import Predictor, bundled_models_dir

    d = tmp_path / "models"
    shutil.copytree(bundled_models_dir(), d)
    meta = json.loads((d / "throughput.json").read_text())
    meta["support"]["families"].append("cdna3")
    (d / "throughput.json").write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match="does not match its own hash"):
        Predictor.load(d)
    shutil.copy(bundled_models_dir() / "throughput.json", d / "throughput.json")
    (d / "throughput.model.json").write_bytes(pickle.dumps({"trees": [1, 2, 3]}))
    with pytest.raises(ArtifactError, match="does not match its metadata"):
        Predictor.load(d)
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setattr(predictor_module, "bundled_models_dir", lambda: empty)
    with pytest.raises(ArtifactError, match="bundled with advisor are damaged or missing"):
        Predictor.load()
