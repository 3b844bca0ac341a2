#!/usr/bin/env bash
# Decode benchmark of this build against an older one in the same device session (run on the H200 machine from
# the repo root). Needs .device/ from make-bundle.sh (this build) and the older build's org.mamba4j jars in
# .device/old/ (mamba-presets*.jar, mamba-api-*.jar, mamba-lm-*.jar where that build has one, mamba-benchmarks-*.jar):
# the older run uses the bundle's third-party jars with its own mamba4j jars. Runs new, old, new, old so drift
# shows. Logs go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash .device/run.sh main org.mamba4j.bench.JniBench >/dev/null 2>&1 || true   # unpacks the bundle
U=/tmp/mamba4j-bundle
rm -rf /tmp/mamba4j-old && cp -r "$U" /tmp/mamba4j-old
rm -f /tmp/mamba4j-old/lib/mamba-presets-*.jar /tmp/mamba4j-old/lib/mamba-api-*.jar /tmp/mamba4j-old/lib/mamba-lm-*.jar \
  /tmp/mamba4j-old/lib/mamba-benchmarks-*.jar
cp .device/old/*.jar /tmp/mamba4j-old/lib/
for round in $(seq 1 ${ROUNDS:-2}); do
  sh "$U/launch.sh" main org.mamba4j.bench.GpuDecodeBench ${BENCH_ARGS:-} > "$OUT/decode_new_$round.md" 2> "$OUT/decode_new_$round.err"
  sh /tmp/mamba4j-old/launch.sh main org.mamba4j.bench.GpuDecodeBench ${BENCH_ARGS:-} > "$OUT/decode_old_$round.md" 2> "$OUT/decode_old_$round.err"
done
for f in "$OUT"/decode_*.md; do echo "== $f"; grep -E '^\| (130m|370m|1.4b|2.8b) \| (F32|BF16) \| (on|off) \|' "$f"; done
