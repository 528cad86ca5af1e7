#!/usr/bin/env bash
# Measure one H200 in at most 8 minutes: the h200-single campaign (collectors/templates/
# h200-single.toml: micro-batch x recompute x sequence length on a Llama-style model sized to
# the GPU, NVML at 50 Hz), rows appended to datasets/campaigns/h200-single.parquet with their
# telemetry. Usage: scripts/h200_campaign.sh [--dry-run] [--resume]
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" != "--dry-run" ]]; then
    command -v nvidia-smi >/dev/null || { echo "error: no nvidia-smi: this script needs an NVIDIA GPU" >&2; exit 2; }
    nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm --format=csv
fi
# 8 minutes in all; every finished run is already in the dataset if the limit cuts the last
# (SIGINT unwinds like Ctrl-C: the run in flight is killed, not orphaned).
command -v advisor >/dev/null || { echo "error: advisor is not on PATH: activate its venv (pip install '.[collect]')" >&2; exit 2; }
timeout --signal=INT --kill-after=60 480 advisor collect --campaign collectors/templates/h200-single.toml \
    --launcher local --dataset datasets/campaigns/h200-single.parquet \
    --runs-dir runs/h200-single "$@"
