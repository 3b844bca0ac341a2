#!/usr/bin/env bash
# One device call that checks and times everything GPU-side (run on the H200 machine, from the repo root,
# after `mvn -q install -DskipTests && scripts/device-bundle.sh mamba-api mamba-lm benchmarks samples` here, which also packs the op test as
# device-optest.sh says; carry [".device", ".device-ops"] when both fit one 64 MiB carry with the ~3.4 MB tree, else the
# Java steps and the op-test steps in two calls):
#   1. transformers reference models (scripts/hf_reference.py)   2. every gpu-tagged JUnit test
#   3. the CUDA kernel test program, if built (.cudatest/kernel_test)   4. decode and generation benchmarks
#   engine: the continuous-batching engine under 1/16/64/256 concurrent clients (EngineBench)
#   finetune: fine-tuning against transformers (scripts/device-hf-finetune.sh)
#   ops: every CUDA op case of the op test carried in .device-ops/ (see device-optest.sh)
#   gemv: the decode gemv's check + timing harness carried as .device/gemv_bench.xz (see device-gemv.sh)
#   decode: GpuDecodeBench --quick --json, then the comparison with benchmarks/baselines/nvidia-h200.json
#   server: the sample server's LoadTest on CUDA (bundle made with the samples module too)
#   train: GpuTrainBench (TRAIN_ONLY=substring, TRAIN_STEPS=n, TRAIN_ARGS="--graphs --dtype BF16"); trainprof: ncu per-kernel times of one training step
# Logs go to $OUT (the device tool brings them back). Steps can be picked: device-run.sh hf tests bench
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
steps=${*:-hf ops tests bench}
export MAMBA4J_HF_MODELS=/tmp/hf-models PYTHONUNBUFFERED=1
for step in $steps; do
  case $step in
    hf) python3 scripts/hf_reference.py "$MAMBA4J_HF_MODELS" 2>&1 | tee "$OUT/hf_reference.log" ;;
    kernels) [ -x .cudatest/kernel_test ] && .cudatest/kernel_test 2>&1 | tee "$OUT/kernel_test.log" ;;
    ops) ( source scripts/device-optest.sh && $OPTEST --backend cuda > "$OUT/op_test.log" 2>&1; grep -E 'FAIL|^op_test:' "$OUT/op_test.log" | tail -40 ) ;;
    tests) bash .device/run.sh tests --include-tag gpu 2>&1 | tee "$OUT/gpu_tests.log" | grep -vE '^\s+at ' | tail -80 ;;
    bench) bash .device/run.sh main org.mamba4j.bench.GpuDecodeBench --json "$OUT/gpu-decode.json" 2>&1 | tee "$OUT/decode_bench.log"
           bash .device/run.sh main org.mamba4j.bench.GpuGenerateBench 2>&1 | tee "$OUT/generate_bench.log" ;;
    engine) bash .device/run.sh main org.mamba4j.bench.EngineBench --device cuda 2>&1 | tee "$OUT/engine_bench.log" ;;
    gemv) bash scripts/device-gemv.sh run > /dev/null; grep -E 'PASSED|FAILED|read rate' "$OUT/gemv.md" ;;
    decode) bash .device/run.sh main org.mamba4j.bench.GpuDecodeBench --quick --json "$OUT/gpu-decode.json" 2>&1 | tee "$OUT/decode_bench.log" | grep -E '^\| (130m|370m|1.4b|2.8b) '
            # band 10%, not the CPU's 25%: fresh H200s agree within ±6% on this table, and 25% let a 16% loss through
            bash .device/run.sh main org.mamba4j.bench.BenchCompare --current "$OUT/gpu-decode.json" \
              --baseline benchmarks/baselines/nvidia-h200.json --band 0.10 2>&1 | tee "$OUT/decode_compare.log" | tail -5 ;;
    finetune) bash scripts/device-hf-finetune.sh ;;
    server) # the sample server over loopback on the GPU (bundle must include samples): 130m shape, 1/16/64 clients
            for c in 1 16 64; do
              bash .device/run.sh main org.mamba4j.samples.LoadTest --device cuda --d-model 768 --layers 24 --slots 64 \
                --clients $c --requests 4 --max-tokens 128 2>&1 | tee "$OUT/server_load_$c.log" | tail -12
            done ;;
    train) # training tokens/s and MFU (issue 12 item 9); TRAIN_ONLY picks cases by substring
           bash .device/run.sh main org.mamba4j.bench.GpuTrainBench cuda ${TRAIN_ONLY:+--only "$TRAIN_ONLY"} \
             --steps ${TRAIN_STEPS:-10} ${TRAIN_ARGS:-} 2>&1 | tee "$OUT/train_bench.log" | grep -E '^\|' ;;
    trainprof) # per-kernel time of one BF16 training step under ncu (clocks not locked), summed by kernel name
           timeout ${PROF_S:-240} /usr/local/cuda/bin/ncu --target-processes all --clock-control none \
             --metrics gpu__time_duration.sum --csv \
             --log-file "$OUT/train_profile.csv" bash .device/run.sh main org.mamba4j.bench.GpuTrainBench cuda \
             --only "${PROF_ONLY:-lm-768x24-8x2048}" --dtype BF16 --steps 1 --warmup 0 > "$OUT/train_profile.log" 2>&1
           python3 scripts/ncu_summary.py "$OUT/train_profile.csv" | tee "$OUT/train_profile.md" | head -40 ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
done
