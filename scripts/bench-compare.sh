#!/usr/bin/env bash
# The performance-regression check (docs/benchmarks.md): runs the JMH suite (or a quick subset) and compares it with
# the stored baseline of this machine kind, printing a table; exits 1 on a regression beyond noise.
#
#   scripts/bench-compare.sh [quick|full] [--kind KIND] [--band FRACTION]      run, then compare
#   scripts/bench-compare.sh --current FILE --kind nvidia-h200                 compare a results file (e.g. GPU JSON)
#   scripts/bench-compare.sh [quick|full] [--kind KIND] --record [--runs N]    run N times (default 3), store the best
#                                                                              of each benchmark as the new baseline
#
# KIND names benchmarks/baselines/KIND.json (default cpu-2vcpu: the 2-vCPU CI/developer machine). BAND is the slow-down
# allowed on top of both runs' 99.9% score errors: default 0.25 here (a quiet machine); CI's quick run uses 0.5.
# Needs benchmarks/target/benchmarks.jar (mvn -q install -DskipTests).
set -euo pipefail
cd "$(dirname "$0")/.."
SUITE=quick; KIND=cpu-2vcpu; BAND=0.25; RECORD=; CURRENT=; RUNS=3
while [ $# -gt 0 ]; do
  case $1 in
    quick|full) SUITE=$1 ;;
    --kind) KIND=$2; shift ;;
    --band) BAND=$2; shift ;;
    --record) RECORD=1 ;;
    --runs) RUNS=$2; shift ;;
    --current) CURRENT=$2; shift ;;
    *) echo "bench-compare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
JAR=benchmarks/target/benchmarks.jar
[ -f "$JAR" ] || { echo "bench-compare.sh: $JAR is missing; run: mvn -q install -DskipTests" >&2; exit 2; }
JAVA=(java -Dorg.bytedeco.javacpp.cachedir=benchmarks/target/javacpp-cache -cp "$JAR")
BASELINE=benchmarks/baselines/$KIND.json
if [ -n "$RECORD" ]; then
  RUNFILES=()
  for i in $(seq "$RUNS"); do
    "${JAVA[@]}" org.mamba4j.bench.BenchSuite "$SUITE" "benchmarks/target/bench/record-$i.json"
    RUNFILES+=("benchmarks/target/bench/record-$i.json")
  done
  "${JAVA[@]}" org.mamba4j.bench.BenchBaseline "$BASELINE" "${RUNFILES[@]}"
  echo "bench-compare.sh: recorded $BASELINE ($SUITE suite, best of $RUNS); commit it with the machine described in docs/benchmarks.md"
elif [ -n "$CURRENT" ]; then
  "${JAVA[@]}" org.mamba4j.bench.BenchCompare --current "$CURRENT" --baseline "$BASELINE" --band "$BAND"
else
  "${JAVA[@]}" org.mamba4j.bench.BenchCompare --run "$SUITE" --current "benchmarks/target/bench/$SUITE.json" \
    --baseline "$BASELINE" --band "$BAND"
fi
