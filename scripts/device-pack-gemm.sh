#!/usr/bin/env bash
# Packing f32 activations to bf16 before cublasGemmEx vs cuBLAS's own FAST_16BF compute on the f32 operands, on the
# training step's shapes (kernels/test/cuda/pack_gemm_bench.cu).
#   here:        bash scripts/device-pack-gemm.sh build   -> .device/pg/pack_gemm_bench (nvcc, ~20 s)
#   on the GPU:  bash scripts/device-pack-gemm.sh run     (device tool: carry [".device/pg"]) -> $OUT/pack_gemm.md
set -euo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in
  build)
    mkdir -p .device/pg
    /usr/local/cuda/bin/nvcc -std=c++17 -O3 --expt-relaxed-constexpr -Ikernels/include -Ikernels/src \
      -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
      kernels/test/cuda/pack_gemm_bench.cu kernels/src/cuda/convert.cu kernels/src/cuda/cublas_loader.cpp \
      -ldl -o .device/pg/pack_gemm_bench ;;
  run)
    OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
    .device/pg/pack_gemm_bench --reps "${REPS:-10}" | tee "$OUT/pack_gemm.md" ;;
  *) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
