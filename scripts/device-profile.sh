#!/usr/bin/env bash
# Per-kernel time of decode steps under Nsight Compute (device machine, repo root, bundle with benchmarks):
#   bash scripts/device-profile.sh "D_MODEL LAYERS DTYPE BATCH MODE" ...
# One ncu run per quoted workload (DecodeProfileProbe, graphs off; ncu flushes caches before each kernel, so the
# times are cold-cache ones); $OUT/profile-*.csv holds every kernel's duration, and the summary (kernel name,
# launches, total ms, share; warm-up steps and weight conversion included; scripts/ncu_summary.py) is printed per workload.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
NCU=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)}
bash .device/run.sh main -version > /dev/null 2>&1
for w in "$@"; do
  tag=$(echo "$w" | tr ' ' '_')
  timeout 200 "$NCU" --clock-control none --target-processes all --metrics gpu__time_duration.sum --csv \
    --log-file "$OUT/profile-$tag.csv" bash .device/run.sh main org.mamba4j.bench.DecodeProfileProbe $w > "$OUT/profile-$tag.log" 2>&1
  echo "## $w"; python3 scripts/ncu_summary.py "$OUT/profile-$tag.csv" | head -16
done
