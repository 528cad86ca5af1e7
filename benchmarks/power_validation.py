"""Fit the power model on measured GPU power and print how well it predicts each source held out.

    python benchmarks/power_validation.py            # fit, leave-one-source-out table
    python benchmarks/power_validation.py --write    # ...and write [fitted] in power.toml

Sources and method: `advisor/perf/power_fit.py`. MAPE in-sample: every source in the fit;
held out: the other sources fit the parameters and this one is predicted.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from advisor.perf.power_fit import FITTED, fit, load_reference, validation_table

DEFAULT_REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "power"
POWER_TOML = Path(__file__).resolve().parents[1] / "advisor" / "catalog" / "power.toml"


def write_fitted(values: dict[str, float], path: Path = POWER_TOML) -> None:
    """Replace the [fitted] values in power.toml, keeping everything else as it is."""
    text = path.read_text()
    for key, value in values.items():
        text, count = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value:.4g}", text, count=1)
        if count != 1:
            raise SystemExit(f"{path}: no line '{key} = ...' to update")
    path.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE,
                        help="shared/reference/power (default: beside the checkout)")
    parser.add_argument("--write", action="store_true", help="write the fit to power.toml")
    args = parser.parse_args()
    if not args.reference.is_dir():
        print(f"error: {args.reference} not found; pass --reference", file=sys.stderr)
        return 2
    ref = load_reference(args.reference)
    table = validation_table(ref)
    print(f"{'source':18} {'target':16} {'points':>6} {'in-sample':>10} {'held out':>9}")
    for row in table.itertuples():
        print(f"{row.source:18} {row.target:16} {row.points:6d} {row.mape_in_sample:9.1f}% "
              f"{row.mape_held_out:8.1f}%")
    params = fit(ref)
    fitted = {k: getattr(params, k) for k in FITTED}
    print("fitted: " + ", ".join(f"{k} = {v:.4g}" for k, v in fitted.items()))
    if args.write:
        write_fitted(fitted)
        print(f"wrote {POWER_TOML}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
