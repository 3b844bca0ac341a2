#!/usr/bin/env bash
# compute-sanitizer over libmamba's CUDA code: memcheck, racecheck, initcheck and synccheck, each over
#   1. every CUDA op case of kernels/test/ops (op_test --backend cuda), and
#   2. one prefill, decode step (eager, captured, replayed) and training step from Java (DeviceSanitizeProbe).
# Run on the GPU device machine from the repo root. Prepare here first:
#   mvn -B -q install -DskipTests && ../shared/device/make-bundle.sh .device mamba-api
# then call the device tool with carry [".device", "presets/target/openblas"] and: bash scripts/device-sanitize.sh
# It builds libmamba with CUDA there (cppbuild.sh, nvcc), and the Java probe loads that library instead of the
# packaged CPU-only one (JavaCPP pathsFirst + preloadpath). Logs go to $OUT; exit 0 only with 0 errors everywhere.
# Status: prepared, NOT RUN yet (the session that wrote it had no GPU budget left); see docs/reliability.md.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ROOT=$PWD
CS=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
PREFIX=$ROOT/presets/cppbuild/linux-x86_64-cuda
OPENBLAS=$ROOT/presets/target/openblas/org/bytedeco/openblas/linux-x86_64
[ -x "$CS" ] || { echo "device-sanitize.sh: compute-sanitizer not found (set COMPUTE_SANITIZER)" >&2; exit 2; }
MAMBA_CUDA=on bash cppbuild.sh install -platform=linux-x86_64 -prefix="$PREFIX" -openblas="$OPENBLAS" > "$OUT/build.log" 2>&1 \
  || { tail -20 "$OUT/build.log"; exit 1; }
# the Java probe, with the CUDA library loaded first (ordinary JVM flags go through the bundle's launcher)
export JAVA_TOOL_OPTIONS="-Dorg.bytedeco.javacpp.pathsFirst=true -Dorg.bytedeco.javacpp.platform.preloadpath=$PREFIX/lib"
failed=0
for tool in memcheck racecheck initcheck synccheck; do
  # racecheck/initcheck/synccheck only mean anything for device code: op cases filtered to the CUDA backend
  "$CS" --tool "$tool" --error-exitcode 99 --print-limit 50 "$PREFIX/bin/op_test" --backend cuda > "$OUT/op_test.$tool.log" 2>&1
  ops=$?
  # the JVM itself touches no GPU memory; --target-processes all follows the launcher's exec
  "$CS" --tool "$tool" --error-exitcode 99 --print-limit 50 --target-processes all \
    bash .device/run.sh main org.mamba4j.DeviceSanitizeProbe > "$OUT/probe.$tool.log" 2>&1
  probe=$?
  echo "$tool: op_test exit $ops ($(grep -E 'ERROR SUMMARY' "$OUT/op_test.$tool.log" | tail -1)), probe exit $probe ($(grep -E 'ERROR SUMMARY' "$OUT/probe.$tool.log" | tail -1))" | tee -a "$OUT/summary.txt"
  [ $ops -eq 0 ] && [ $probe -eq 0 ] || failed=1
done
exit $failed
