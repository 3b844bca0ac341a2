#!/usr/bin/env bash
# The GPU soak and the GPU create/close cycles of docs/reliability.md (GpuSoak), on the device machine, from the
# repo root, after preparing here: mvn -B -q install -DskipTests && ../shared/device/make-bundle.sh .device mamba-api mamba-lm
# (the bundle's natives must have CUDA: build them where nvcc is, or load a CUDA libmamba as device-sanitize.sh does).
#   bash scripts/device-soak.sh [MINUTES] [CYCLES]       defaults: 10 minutes, 100,000 cycles
# Logs go to $OUT; exit 0 only if both pass. Status: prepared, NOT RUN yet (no GPU budget in the writing session).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash .device/run.sh main org.mamba4j.lm.GpuSoak soak "${1:-10}" 2>&1 | tee "$OUT/soak.log"
soak=${PIPESTATUS[0]}
bash .device/run.sh main org.mamba4j.lm.GpuSoak cycles "${2:-100000}" 2>&1 | tee "$OUT/cycles.log"
cycles=${PIPESTATUS[0]}
echo "soak exit $soak, cycles exit $cycles"
[ "$soak" -eq 0 ] && [ "$cycles" -eq 0 ]
