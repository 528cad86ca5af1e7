#!/usr/bin/env bash
# One H200 lease in about 9 minutes: the power probe (collectors/power_probe.py: the power
# limit's enforcement window and kernel power ratios, ~3.5 min), the kernel probe
# (collectors/kernel_probe.py: fused attention and MoE expert GEMMs, ~1 min), then as much of the
# h200-single campaign as fits (scripts/h200_campaign.sh's runs). Everything lands in OUT_DIR:
#   probe/{kernels,samples,driver_samples}.csv.gz, probe/device.json,
#   kernel-probe/{kernels.csv,device.json},
#   h200-single.parquet (the campaign's rows), runs.tar.gz (per-run logs and traces), log.
# Usage: scripts/h200_measure.sh OUT_DIR [CAMPAIGN_SECONDS]
# Needs torch, nvidia-ml-py and advisor's dependencies importable (pip install '.[collect]').
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/h200_measure.sh OUT_DIR [CAMPAIGN_SECONDS]}
campaign_s=${2:-240}
mkdir -p "$out/probe"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,power.default_limit,clocks.max.sm,temperature.gpu --format=csv
nvidia-smi -q -d POWER,CLOCK,TEMPERATURE,PERFORMANCE | head -120
python3 - <<'EOF'
import importlib
for name in ("torch", "pynvml", "pandas", "pyarrow", "numpy", "scipy", "typer", "rich", "filelock"):
    try:
        m = importlib.import_module(name)
        print(name, getattr(m, "__version__", "?"))
    except Exception as exc:
        print(name, "MISSING", exc)
EOF
echo "== probe $(date -u +%T)"
timeout --signal=INT --kill-after=20 260 python3 -m collectors.power_probe --out "$out/probe" \
    || echo "probe exited with $?"
echo "== kernel probe $(date -u +%T)"
timeout --signal=INT --kill-after=20 120 python3 -m collectors.kernel_probe \
    --out "$out/kernel-probe" || echo "kernel probe exited with $?"
echo "== campaign $(date -u +%T)"
if command -v advisor >/dev/null; then
    timeout --signal=INT --kill-after=40 "$campaign_s" advisor collect --campaign h200-single \
        --launcher local --dataset "$out/h200-single.parquet" --runs-dir runs/h200-single \
        || echo "campaign exited with $?"
else
    echo "advisor is not installed: no campaign"
fi
tar czf "$out/runs.tar.gz" runs/h200-single 2>/dev/null || true
echo "== done $(date -u +%T)"
