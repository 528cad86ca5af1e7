"""Speed of the scheduler-facing Predictor: batch predictions/s, one configuration's latency,
and the cost of `import advisor`.

    python benchmarks/predictor_speed.py [--repeats 5]

Figures are medians (these machines are noisy). Targets: >= 100,000 predictions/s in batch
(issue 16 asks 300,000), <= 2 ms for one configuration (a (ParallelConfig, Job) pair; also shown
as a one-row DataFrame), import <= 0.5 s. The batch is timed as a DataFrame (`predict`, the
scheduler API) and as a `Table` (`predict_table`, what recommend's search calls).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import pandas as pd

from advisor import catalog
from advisor.core.parallel import make_config, make_job
from advisor.core.space import enumerate_space, space_table
from advisor.predict.predictor import Predictor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    imports = []
    for _ in range(args.repeats):
        out = subprocess.run([sys.executable, "-c", "import time; t = time.perf_counter(); "
                              "import advisor; print(time.perf_counter() - t)"],
                             capture_output=True, text=True, check=True)
        imports.append(float(out.stdout))
    t0 = time.perf_counter()
    predictor = Predictor.load()
    load_s = time.perf_counter() - t0
    model, platform = catalog.load_model("llama3-70b"), catalog.load_platform("h100")
    job = make_job(model, platform, num_gpus=64)
    space = enumerate_space(job).drop(columns="tp_beyond_nvlink").assign(
        model=model.name, gpu=platform.name)
    table = space_table(job).drop(["tp_beyond_nvlink"])
    pair = [(make_config(job, tp=4, pp=2), job)]
    row = pd.DataFrame([pair[0][0].to_dict() | {"model": model.name, "gpu": platform.name}])
    predictor.predict(pair)
    predictor.predict(row)
    batch, batch_table, single, single_row = [], [], [], []
    for _ in range(args.repeats):
        t = time.perf_counter()
        predictor.predict(space)
        batch.append(len(space) / (time.perf_counter() - t))
        t = time.perf_counter()
        predictor.predict_table(model, platform, table)
        batch_table.append(len(table) / (time.perf_counter() - t))
        for _ in range(20):
            t = time.perf_counter()
            predictor.predict(pair)
            single.append(time.perf_counter() - t)
        for _ in range(20):
            t = time.perf_counter()
            predictor.predict(row)
            single_row.append(time.perf_counter() - t)
    print(f"import advisor:           {statistics.median(imports) * 1e3:8.1f} ms")
    print(f"Predictor.load():         {load_s * 1e3:8.1f} ms (reads the trees; XGBoost is "
          f"loaded, through its C library, for batches over 512 rows only)")
    print(f"batch ({len(space):,} configs):  {statistics.median(batch):10,.0f} predictions/s")
    print(f"  as a Table:             {statistics.median(batch_table):10,.0f} predictions/s")
    print(f"one configuration:        {statistics.median(single) * 1e3:8.2f} ms")
    print(f"  as a one-row DataFrame: {statistics.median(single_row) * 1e3:8.2f} ms")


if __name__ == "__main__":
    main()
