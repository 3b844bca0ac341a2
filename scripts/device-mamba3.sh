#!/usr/bin/env bash
# Mamba-3 official parity on the GPU device machine, in one command:
#   1. scripts/mamba3_official_reference.py: random official MambaLMHeadModel(Mamba3) folders + float64 references
#      (and the official Triton kernels' errors against them) into $MAMBA4J_M3_REFERENCE (default /tmp/m3ref);
#   2. Mamba3OfficialParityTest (tag gpu) through the JUnit bundle, reading those folders;
#   3. scripts/bench_official_mamba3.py: the official Triton kernels' training step and prefill times.
# Logs, the error JSONs and the JUnit reports land under $OUT.
#
# Here, first:  bash scripts/official_mamba3_sources.sh /path/to/bare/state-spaces/mamba.git   (third_party/, ignored)
#               mvn -q install -DskipTests && /work/shared/device/make-bundle.sh .device mamba-api mamba-lm
# Device run:   carry [".device", "third_party"], command: bash scripts/device-mamba3.sh
# Env: M3_SKIP_BENCH=1 skips step 3; M3_BENCH_ARGS="train-768x24-T2048 ... [--iters N] [--tune one]" picks cases.
# Device time: step 1 limits each official Triton kernel to one launch configuration (the error table does not need
# tuning) and should take ~2-3 min; step 3 runs the official autotuning (9-81 configurations per kernel, compiled
# one after another: several minutes on a fresh machine before the first timing; warmup_s reports it), so give it
# its own call (M3_SKIP_BENCH=1 here, then M3_SKIP_REF=1 M3_SKIP_TESTS=1) if the 10-minute command limit is near.
# At most 8 files come back from $OUT: the logs, official_errors.json, m3-official-errors.tgz and junit-reports.
set -uo pipefail
OUT=${OUT:-/tmp/m3-out}
mkdir -p "$OUT"
export PYTHONPATH=third_party/official-mamba${PYTHONPATH:+:$PYTHONPATH}
export MAMBA4J_M3_REFERENCE=${MAMBA4J_M3_REFERENCE:-/tmp/m3ref} PYTHONUNBUFFERED=1
status=0

if [ "${M3_SKIP_REF:-0}" != 1 ]; then
  echo "== 1. official float64 references -> $MAMBA4J_M3_REFERENCE"
  python3 scripts/mamba3_official_reference.py "$MAMBA4J_M3_REFERENCE" 2>&1 | tee "$OUT/m3-reference.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  cp "$MAMBA4J_M3_REFERENCE/official_errors.json" "$OUT/" 2>/dev/null
  (cd "$MAMBA4J_M3_REFERENCE" && tar czf "$OUT/m3-official-errors.tgz" ./*/official_errors.json ./*/config.json) 2>/dev/null
fi

if [ "${M3_SKIP_TESTS:-0}" != 1 ]; then
  echo "== 2. Mamba3OfficialParityTest"
  if [ -f .device/run.sh ]; then
    bash .device/run.sh tests --include-tag gpu --include-classname '.*Mamba3OfficialParity.*' 2>&1 | tee "$OUT/m3-parity.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  else
    echo "no .device/run.sh: build the bundle here and carry .device" | tee "$OUT/m3-parity.log"
    status=1
  fi
fi

if [ "${M3_SKIP_BENCH:-0}" != 1 ]; then
  echo "== 3. official Mamba-3 Triton benchmark"
  # shellcheck disable=SC2086
  python3 scripts/bench_official_mamba3.py ${M3_BENCH_ARGS:-} 2>&1 | tee "$OUT/m3-official-bench.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
exit $status
