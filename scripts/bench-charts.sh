#!/usr/bin/env bash
# Benchmark JSON (JMH runs, baselines, GpuDecodeBench --json) to PNG charts, e.g. for docs/benchmarks.md:
#   scripts/bench-charts.sh OUT_DIR FILE [FILE...]
# The first file is the reference of relative.png; see BenchChart's Javadoc for the charts.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: scripts/bench-charts.sh OUT_DIR FILE [FILE...]" >&2; exit 2; }
OUT=$1; shift
JAR=benchmarks/target/benchmarks.jar
[ -f "$JAR" ] || { echo "bench-charts.sh: $JAR is missing; run: mvn -q install -DskipTests" >&2; exit 2; }
java -cp "$JAR" org.mamba4j.bench.BenchChart --out "$OUT" "$@"
