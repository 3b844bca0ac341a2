#!/usr/bin/env bash
# The tensor-core tier's own check + timing harness (kernels/test/cuda/gemm_tc_bench.cu).
#   here:        bash scripts/device-gemm-tc.sh build     -> .device/tc/gemm_tc_bench (nvcc, ~30 s)
#   on the H200: bash scripts/device-gemm-tc.sh run       (device tool: carry [".device/tc"]) -> $OUT/gemm_tc.md
# Every tile is checked against the others bit for bit and against a double reference, then timed next to cuBLAS
# (activations packed to bf16 + cublasGemmEx, the fast mode's path) through CUDA graphs of 20 calls.
set -euo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in
  build)
    mkdir -p .device/tc
    NV="${NVCC:-/usr/local/cuda/bin/nvcc} -std=c++17 -O3 --expt-relaxed-constexpr -lineinfo -Ikernels/include -Ikernels/src"
    $NV -gencode arch=compute_90a,code=sm_90a -c kernels/src/cuda/gemm/gemm_tc_sm90a.cu -o .device/tc/gemm_tc_sm90a.o
    $NV -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
      kernels/test/cuda/gemm_tc_bench.cu kernels/src/cuda/gemm/gemm_tc.cu kernels/src/cuda/convert.cu \
      kernels/src/cuda/cublas_loader.cpp .device/tc/gemm_tc_sm90a.o -ldl -o .device/tc/gemm_tc_bench ;;
  run)
    OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
    .device/tc/gemm_tc_bench --reps "${REPS:-20}" | tee "$OUT/gemm_tc.md" ;;
  *) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
