#!/usr/bin/env bash
# The long fuzzing run: every @FuzzTest of mamba-api and mamba-lm, one after the other, each for DURATION (default 5m)
# in its own JVM, after a build of the modules' tests. Findings (crash-*, timeout-*) land in <module>/target/jazzer/;
# copy each one into the target's src/test/resources/...Inputs folder (a regression seed) before fixing it. The
# generated corpora stay in <module>/target/jazzer/.cifuzz-corpus, so a second run continues where the first stopped.
#
#   scripts/fuzz.sh [DURATION] [TARGET...]     e.g. scripts/fuzz.sh 10m SafeTensorsFuzzTest
#
# Extra Maven arguments: MAVEN_ARGS (e.g. MAVEN_ARGS="-o -Dmaven.repo.local=/tmp/m2"). Writes a summary of
# executions, rejections, slowest input and largest allocation per target to target/fuzz-long/summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-5m}
shift || true
MODULES=(mamba-api mamba-lm)
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  mapfile -t TARGETS < <(for m in "${MODULES[@]}"; do find "$m/src/test/java" -name '*FuzzTest.java' -exec basename {} .java \;; done | sort)
fi
OUT=target/fuzz-long
mkdir -p "$OUT"
# install (after a full build, as before): mamba-lm's tests take mamba-api's test helpers from its installed test jar
mvn -B -q ${MAVEN_ARGS:-} -pl mamba-api,mamba-lm install -DskipTests || exit 1
failed=0
for t in "${TARGETS[@]}"; do
  module=$(for m in "${MODULES[@]}"; do [ -n "$(find "$m/src/test/java" -name "$t.java")" ] && echo "$m"; done | head -1)
  [ -n "$module" ] || { echo "no fuzz target $t" >&2; failed=1; continue; }
  echo "fuzzing $t ($module) for $DURATION"
  if ! mvn -B ${MAVEN_ARGS:-} -pl "$module" surefire:test@fuzz -Dtest="$t" -Dfuzz.duration="$DURATION" -Dfuzz.hooks=true > "$OUT/$t.log" 2>&1; then
    failed=1
    echo "  FINDING or failure: see $OUT/$t.log"
  fi
  {
    echo "$t ($DURATION): $(grep -E '^Done [0-9]+ runs' "$OUT/$t.log" | tail -1)"
    echo "  $(grep -E '^fuzz ' "$OUT/$t.log" | tail -1)"
    grep -E '^#[0-9]+.*(DONE|pulse)' "$OUT/$t.log" | tail -1 | sed 's/^/  /'
  } | tee -a "$OUT/summary.txt"
done
exit $failed
