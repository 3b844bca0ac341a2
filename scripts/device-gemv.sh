#!/usr/bin/env bash
# The decode matrix-vector kernel's own check + timing harness (kernels/test/cuda/gemv_bench.cu).
#   here:        bash scripts/device-gemv.sh build     -> .device/gemv_bench.xz (nvcc, ~1 min)
#   on the H200: bash scripts/device-gemv.sh run       (device tool: carry [".device"]) -> $OUT/gemv.md
# Checks the kernel's schedule bit for bit against one output per group and row 0 of 8 against row 0 alone, and
# against a double reference; then times every real decode product of the four Mamba-1 sizes at 1/2/4/8 rows
# next to the schedule before, every group size, and cuBLAS, through CUDA graphs that stream the weights from HBM.
set -euo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in
  build)
    mkdir -p .device
    T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
    "${NVCC:-/usr/local/cuda/bin/nvcc}" -std=c++17 -O3 --expt-relaxed-constexpr \
      -gencode arch=compute_90,code=sm_90 -Ikernels/include -Ikernels/src \
      kernels/test/cuda/gemv_bench.cu kernels/src/cuda/gemm/gemv.cu kernels/src/cuda/convert.cu \
      kernels/src/cuda/cublas_loader.cpp -ldl -o "$T/gemv_bench"
    strip "$T/gemv_bench" && xz -T0 -c "$T/gemv_bench" > .device/gemv_bench.xz ;;
  run)
    OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
    xz -d -c .device/gemv_bench.xz > /tmp/gemv_bench && chmod +x /tmp/gemv_bench
    /tmp/gemv_bench --reps "${REPS:-20}" | tee "$OUT/gemv.md" ;;
  *) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
