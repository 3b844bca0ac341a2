#!/usr/bin/env bash
# The GPU soak and the GPU create/close cycles of docs/reliability.md (GpuSoak), on the device machine, from the
# repo root, after preparing here: mvn -B -q install -DskipTests && scripts/device-bundle.sh mamba-api mamba-lm
# (the bundle's natives must have CUDA: build where nvcc is). A device call lasts at most 10 minutes, so the
# 10-minute soak spans two calls made back to back (the machine stays warm for 30 s between them):
#   bash scripts/device-soak.sh start [MINUTES]    starts the soak in its own session, returns after ~9.5 minutes
#   bash scripts/device-soak.sh collect [CYCLES]   waits for the soak's end, then runs CYCLES (default 20,000; 0: none) cycles
# Logs go to $OUT (soak.log, cycles.log); collect exits 0 only if both pass.
# CALL_T0 (epoch seconds when the device call began; default now) lets other work run first in the same call:
#   export CALL_T0=$(date +%s); bash scripts/device-run.sh ops tests; bash scripts/device-soak.sh start 10
# (start still returns ~9.5 minutes after CALL_T0; the soak itself keeps running for its 10 minutes).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=${CALL_T0:-$(date +%s)}
case ${1:-} in
  start)
    bash .device/run.sh main -version > /dev/null 2>&1   # unpacks the bundle before the clock matters
    rm -f /tmp/soak.rc
    # GPU clocks, temperature and power every 10 s beside the soak: tells a throttled GPU from a slower library
    setsid nohup nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu \
      --format=csv -l 10 > /tmp/smi.log 2>&1 < /dev/null &
    setsid nohup bash -c "bash .device/run.sh main org.mamba4j.lm.GpuSoak soak ${2:-10} > /tmp/soak.log 2>&1; echo \$? > /tmp/soak.rc" \
      > /dev/null 2>&1 < /dev/null &
    while [ $(( $(date +%s) - t0 )) -lt 570 ] && [ ! -f /tmp/soak.rc ]; do sleep 5; done
    cp /tmp/soak.log "$OUT/soak-part1.log"; tail -3 /tmp/soak.log ;;
  collect)
    while [ ! -f /tmp/soak.rc ] && [ $(( $(date +%s) - t0 )) -lt 420 ]; do sleep 5; done
    cp /tmp/soak.log "$OUT/soak.log"; tail -3 /tmp/soak.log
    pkill -f 'nvidia-smi --query-gpu' ; cp /tmp/smi.log "$OUT/smi.log" 2>/dev/null
    soak=$(cat /tmp/soak.rc 2>/dev/null || echo 124)
    [ "${2:-20000}" -eq 0 ] && { echo "soak exit $soak (no cycles asked)"; [ "$soak" -eq 0 ]; exit; }
    timeout $(( 590 - ($(date +%s) - t0) )) bash .device/run.sh main org.mamba4j.lm.GpuSoak cycles "${2:-20000}" 2>&1 | tee "$OUT/cycles.log" | tail -3
    cycles=${PIPESTATUS[0]}
    echo "soak exit $soak, cycles exit $cycles"
    [ "$soak" -eq 0 ] && [ "$cycles" -eq 0 ] ;;
  *) echo "usage: device-soak.sh start [MINUTES] | collect [CYCLES]" >&2; exit 2 ;;
esac
