#!/usr/bin/env bash
# compute-sanitizer over libmamba's CUDA code, each tool over
#   1. every CUDA op case of kernels/test/ops (op_test --backend cuda), and
#   2. one prefill, decode step (eager, captured, replayed) and training step from Java (DeviceSanitizeProbe).
# Prepare here (the op test is built with CUDA wherever nvcc is, so nothing is compiled there):
#   mvn -B -q install -DskipTests && scripts/device-bundle.sh mamba-api mamba-lm   (also packs .device-ops/: the op test)
# then on the device (carry [".device", ".device-ops"]; device-bundle.sh prints both sizes, which with the ~3.4 MB
# tree must fit the 64 MiB limit together), from the repo root:
#   bash scripts/device-sanitize.sh [TOOL ...]        default: memcheck racecheck initcheck synccheck
# SAN_TIMEOUT (seconds per tool and program, default 240) bounds each run: a run cut short says so in the summary
# and counts as a failure. Logs and $OUT/summary.txt (each run's ERROR SUMMARY) go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
CS=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
[ -x "$CS" ] || { echo "device-sanitize.sh: compute-sanitizer not found (set COMPUTE_SANITIZER)" >&2; exit 2; }
LIMIT=${SAN_TIMEOUT:-240}
source scripts/device-optest.sh   # $OPTEST and its OpenBLAS
run() {  # run NAME TOOL CMD...  → exit status (124 = cut short), a summary line
  local name=$1 tool=$2; shift 2
  timeout "$LIMIT" "$CS" --tool "$tool" --error-exitcode 99 --print-limit 50 "$@" > "$OUT/$name.$tool.log" 2>&1
  local rc=$?
  local s; s=$(grep -E 'ERROR SUMMARY' "$OUT/$name.$tool.log" | tail -1)
  [ $rc -eq 124 ] && s="CUT SHORT after ${LIMIT}s; $(grep -c PASS "$OUT/$name.$tool.log") cases passed before"
  [ "$name" = op_test ] && s="$s; $(grep -E '^op_test:' "$OUT/$name.$tool.log" | tail -1)"
  echo "$tool $name: exit $rc ($s)" | tee -a "$OUT/summary.txt"
  return $rc
}
failed=0
for tool in ${*:-memcheck racecheck initcheck synccheck}; do
  run op_test "$tool" $OPTEST --backend cuda || failed=1
  # the JVM itself touches no GPU memory; --target-processes all follows the launcher's exec
  run probe "$tool" --target-processes all bash .device/run.sh main org.mamba4j.DeviceSanitizeProbe || failed=1
done
exit $failed
