#!/usr/bin/env python3
"""Totals of an `ncu --csv --metrics gpu__time_duration.sum` run (per launch or --print-summary per-kernel), biggest first:
kernel name, launches, total ms, share. Reads the CSV rows ncu prints after the program's own output."""
import csv
import sys
from collections import defaultdict

rows = []
with open(sys.argv[1], newline="") as f:
    lines = [l for l in f if l.startswith('"')]
reader = csv.DictReader(lines)
total = defaultdict(float)
count = defaultdict(int)
for r in reader:
    name = r.get("Kernel Name") or r.get("Function Name") or "?"
    metric = r.get("Metric Name", "")
    if metric and metric != "gpu__time_duration.sum":
        continue
    unit = (r.get("Metric Unit") or "").strip()
    # one row per launch (Metric Value), or per kernel with --print-summary (Invocations, Average)
    inv = int(float(r["Invocations"])) if r.get("Invocations") else 1
    val = r.get("Average") or r.get("Metric Value") or "0"
    v = float(val.replace(",", ""))
    scale = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0}.get(unit, 1e-6)
    name = name.split("(")[0]
    total[name] += v * scale * inv
    count[name] += inv
grand = sum(total.values())
print(f"| kernel | launches | ms | share |\n|---|---:|---:|---:|")
for name, ms in sorted(total.items(), key=lambda kv: -kv[1]):
    print(f"| {name[:90]} | {count[name]} | {ms:.3f} | {100 * ms / grand if grand else 0:.1f}% |")
print(f"| total | {sum(count.values())} | {grand:.3f} | |")
