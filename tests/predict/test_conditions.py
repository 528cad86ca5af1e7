"""Conditions are data: a power limit, an inlet temperature, degraded nodes or any cluster key
given as a column of the Predictor's frame predicts exactly what the command line predicts;
a column the Predictor does not read is named on its rows, never silently dropped."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from advisor.predict.predictor import Predictor

JOB = {"model": "llama3-70b", "gpu": "h100", "num_gpus": 64, "seq_len": 8192, "gbs": 128,
       "tp": 4, "pp": 4}
FIGURES = ("pred_tokens_per_sec_per_gpu", "pred_tokens_per_sec_per_gpu_p10",
           "pred_tokens_per_sec_per_gpu_p90", "pred_avg_power_w", "pred_peak_power_w",
           "pred_throttle_risk")


def _cli(*flags: str, platform: str = "h100") -> dict:
    out = subprocess.run([sys.executable, "-m", "advisor", "predict", "-m", "llama3-70b", "-g",
                          "64", "-p", platform, "--seq-len", "8192", "--gbs", "128", "--tp",
                          "4", "--pp", "4", *flags, "--json"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["learned"]


@pytest.mark.parametrize(("columns", "flags"), [
    ({"power_limit_w": 500}, ("--power-limit-w", "500")),
    ({"inlet_c": 35}, ("--inlet-c", "35")),
    ({"degraded_nodes": 1, "degraded_power_w": 400},
     ("--degraded-nodes", "1", "--degraded-power-w", "400")),
])
def test_a_condition_column_predicts_what_the_command_line_does(columns, flags):
    frame = pd.DataFrame([JOB, {**JOB, **columns}])
    api = Predictor.load().predict(frame)
    cli, plain = _cli(*flags), api.iloc[0]
    for figure in FIGURES:
        assert api.iloc[1][figure] == pytest.approx(cli[figure], rel=1e-9), figure
    assert api.iloc[1]["pred_avg_power_w"] != plain["pred_avg_power_w"]   # it did change


def test_a_cluster_key_column_is_a_cluster_file(tmp_path):
    cluster = tmp_path / "slow-net.toml"
    cluster.write_text('base = "h100"\nname = "h100"\nnum_nics_per_node = 1\n'
                       'nic_bandwidth_bytes_per_s = 50e9\n[sources]\n'
                       'num_nics_per_node = "one NIC per node, as on our test cluster"\n'
                       'nic_bandwidth_bytes_per_s = "400 Gb/s, the NIC datasheet"\n')
    row = {**JOB, "num_nics_per_node": 1, "nic_bandwidth_bytes_per_s": 50e9}
    api = Predictor.load().predict(pd.DataFrame([JOB, row]))
    cli = _cli(platform=str(cluster))
    assert api.iloc[1]["pred_tokens_per_sec_per_gpu"] == pytest.approx(
        cli["pred_tokens_per_sec_per_gpu"], rel=1e-9)
    assert api.iloc[1]["pred_tokens_per_sec_per_gpu"] < api.iloc[0]["pred_tokens_per_sec_per_gpu"]


def test_a_refused_cell_is_that_rows_error_and_an_unread_column_is_named():
    frame = pd.DataFrame([JOB, {**JOB, "power_limit_w": 100},
                          {**JOB, "power_limt_w": 500}])
    out = Predictor(None).predict(frame)
    assert out.loc[0, "pred_error"] == "" and out.loc[2, "pred_error"] == ""
    assert "power_limit_w = 100 W" in out.loc[1, "pred_error"]
    assert out.loc[2, "pred_notes"].startswith("not read: column(s) power_limt_w: did you "
                                               "mean power_limit_w")
    assert out.loc[0, "pred_notes"] == ""
    assert "pred_notes" not in Predictor(None).predict(pd.DataFrame([JOB]))


def test_a_condition_column_of_a_table_applies_per_row():
    from advisor import catalog
    from advisor.core.parallel import make_config, make_job
    from advisor.core.table import Table

    model, platform = catalog.load_model("llama3-70b"), catalog.load_platform("h100")
    job = make_job(model, platform, num_gpus=64, seq_len=8192, gbs=128)
    config = make_config(job, tp=4, pp=4).to_dict()
    table = Table.from_frame(pd.DataFrame([config, {**config, "power_limit_w": 500}]))
    out = Predictor.load().predict_table(model, platform, table).to_frame()
    capped = Predictor.load().predict(pd.DataFrame([{**JOB, "power_limit_w": 500}])).iloc[0]
    assert out["pred_tokens_per_sec_per_gpu"].iloc[1] == pytest.approx(
        capped["pred_tokens_per_sec_per_gpu"], rel=1e-9)
    assert out["pred_tokens_per_sec_per_gpu"].iloc[1] < out["pred_tokens_per_sec_per_gpu"].iloc[0]
