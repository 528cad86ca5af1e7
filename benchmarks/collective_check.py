"""Do the collective costs reproduce measured collectives? Fit and score them per platform.

    python benchmarks/collective_check.py            # score; fit each platform's domain
    python benchmarks/collective_check.py --write    # ...and write collective_kernels.toml

Prints, per platform whose NVLink/xGMI domain was measured (XLA's collective tables: H100 and
B200 hosts, GB200/GB300 NVL72 domains up to 72 GPUs, MI300X and MI350 hosts), the error of the
constants fitted on A100's NCCL tables (`calibration.toml [collectives]`, what every platform
used before), of the platform's own fit, and the median predicted / measured time of messages
of 16 MB and up (what training moves).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
from _checkout import head

from advisor.perf import collective_fit
from advisor.perf.calibration import load_calibration
from advisor.perf.collectives import load_domain_table

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "advisor" / "catalog" / "collective_kernels.toml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {TARGET.name}")
    args = parser.parse_args()

    tables = collective_fit.load_tables()
    base = replace(load_calibration().collectives, domain=None)
    fits, scores, rows = {}, {}, []
    for name, part in tables.groupby("platform", sort=True):
        fits[name] = collective_fit.fit_domain(base, part)
        scores[name] = collective_fit.score(replace(base, domain=fits[name]), part)
        before = collective_fit.score(base, part)
        d = fits[name]
        rows.append({"platform": name, "rows": len(part),
                     "groups": ",".join(str(int(g)) for g in sorted(part.devices_per_group
                                                                   .unique())),
                     "a100_median_pct": before["median_ape_pct"],
                     "a100_large_ratio": before["large_median_ratio"],
                     "own_median_pct": scores[name]["median_ape_pct"],
                     "own_large_median_pct": scores[name]["large_median_ape_pct"],
                     "own_large_ratio": scores[name]["large_median_ratio"],
                     "alpha0_us": d.alpha0_s * 1e6, "alpha1_us": d.alpha1_s * 1e6,
                     "efficiency": d.efficiency, "group_penalty": d.group_penalty})
    pd.set_option("display.width", 200)
    print("In-domain collectives: A100-fitted constants against each platform's own fit "
          "(error of time, %; ratio = predicted / measured, messages >= 16 MB)\n")
    print(pd.DataFrame(rows).round(3).to_string(index=False))
    if args.write:
        TARGET.write_text(collective_fit.toml_text(fits, scores, note=f"Fitted at {head()}."),
                          encoding="utf-8")
        load_domain_table.cache_clear()
        print(f"\nwrote {TARGET.relative_to(ROOT)}")
    return 0



if __name__ == "__main__":
    sys.exit(main())
