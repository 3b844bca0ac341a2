#!/usr/bin/env bash
# Per-kernel time of decode steps under Nsight Compute (device machine, repo root, bundle with benchmarks):
#   bash scripts/device-profile.sh "D_MODEL LAYERS DTYPE BATCH MODE" ...
# One ncu run per quoted workload (DecodeProfileProbe, graphs off; ncu flushes caches before each kernel, so the
# times are cold-cache ones); $OUT/profile-*.csv holds every kernel's duration, and the summary (kernel name,
# launches, total µs, share; warm-up steps and weight conversion included) is printed per workload.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
NCU=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)}
bash .device/run.sh main -version > /dev/null 2>&1
for w in "$@"; do
  tag=$(echo "$w" | tr ' ' '_')
  timeout 200 "$NCU" --clock-control none --target-processes all --metrics gpu__time_duration.sum --csv \
    --log-file "$OUT/profile-$tag.csv" bash .device/run.sh main org.mamba4j.bench.DecodeProfileProbe $w > "$OUT/profile-$tag.log" 2>&1
  python3 - "$OUT/profile-$tag.csv" "$w" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: print(sys.argv[2], ': no ncu rows'); sys.exit()
h = rows[0]; ki = h.index('Kernel Name'); vi = h.index('Metric Value'); ui = h.index('Metric Unit')
tot = collections.defaultdict(float); n = collections.Counter()
for r in rows[1:]:
    v = float(r[vi].replace(',', '')); v = v / 1000 if r[ui] in ('ns', 'nsecond') else v * 1000 if r[ui] in ('ms', 'msecond') else v
    k = r[ki].split('(')[0][:70]; tot[k] += v; n[k] += 1
s = sum(tot.values()); print(f'## {sys.argv[2]}: {s:.1f} us in {sum(n.values())} launches')
for k, v in sorted(tot.items(), key=lambda kv: -kv[1])[:14]: print(f'  {v:9.1f} us {100*v/s:5.1f}% x{n[k]:4d}  {k}')
PY
done
