"""Every configuration in the reference file ran on real hardware: none may be predicted not
to fit. Rows whose printed configuration contradicts itself are reported, not hidden."""

import pandas as pd

from advisor import catalog
from advisor.data.predict_input import parse_run_row, read_rows
from advisor.perf.memory import WEIGHT_BYTES
from advisor.predict.rows import predict_frame


def _cannot_hold_own_weights_and_grads(row: pd.Series) -> bool:
    """Independent of the memory model: 16-bit weights plus 16-bit gradients of every parameter
    the stated layout puts on one GPU (no optimizer, no activations) exceed its memory."""
    model = catalog.find_model(row["model"])
    platform = catalog.load_platform(row["gpu"])
    config, _ = parse_run_row(row, model)
    if config.dp_sharding == "full":
        return False
    params = model.params
    per_gpu = ((sum(params.layers_dense) + params.embedding + params.output) / config.tp
               + sum(params.layers_expert) / (config.ep * config.etp)) / config.pp
    return per_gpu * 2 * WEIGHT_BYTES > platform.memory_capacity_bytes


def test_every_reference_run_fits(reference_csv):
    frame = read_rows(reference_csv)
    known = frame[[catalog.find_model(m) is not None for m in frame["model"]]]
    pred = predict_frame(known)
    invalid = pred[pred["pred_error"] != ""]
    not_fit = pred[(pred["pred_error"] == "") & (pred["pred_fits"] == False)]  # noqa: E712
    contradictory = not_fit[not_fit.apply(_cannot_hold_own_weights_and_grads, axis=1)]
    unexplained = not_fit.drop(contradictory.index)
    report = pd.concat([invalid, contradictory])[["model", "gpu", "num_gpus", "tp", "pp", "ep",
                                                   "dp", "dp_sharding", "pred_error"]]
    print(f"\n{len(pred)} reference rows with catalog models; {len(invalid)} invalid as printed, "
          f"{len(contradictory)} whose printed layout cannot hold its own weights and "
          f"gradients:\n{report.to_string()}")
    fitting = pred[pred["pred_fits"] == True]  # noqa: E712
    ratio = (fitting["pred_memory_gb"] / fitting["pred_capacity_gb"]).max()
    print(f"tightest fitting row uses {ratio:.1%} of its GPU's memory")
    assert unexplained.empty, unexplained[["model", "gpu", "tp", "pp", "ep", "pred_memory_gb",
                                           "pred_capacity_gb", "pred_assumed"]].to_string()
    # Inconsistent rows must stay rare: at most 1 % of the file.
    assert len(invalid) + len(contradictory) <= 0.01 * len(pred)
