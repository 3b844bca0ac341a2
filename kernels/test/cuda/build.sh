#!/usr/bin/env bash
# Builds the CUDA kernel test program from the libmamba CUDA sources (no Java, no OpenBLAS):
#   bash kernels/test/cuda/build.sh [OUT_DIR]     (default OUT_DIR: <repo>/.cudatest)
# Then run OUT_DIR/kernel_test [--seed N] [--no-timing] [--lmhead FILE] on a machine with a GPU.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=${1:-$ROOT/.cudatest}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
mkdir -p "$OUT/obj"
FLAGS="-std=c++17 -O3 --expt-relaxed-constexpr -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80 -I$ROOT/kernels/include -I$ROOT/kernels/src"
SOURCES="$(find "$ROOT/kernels/src/cuda" -name '*.cu' -o -name '*.cpp' | sort) $ROOT/kernels/test/cuda/kernel_test.cu"
pids=()
for s in $SOURCES; do
  rel=${s#$ROOT/kernels/}
  o="$OUT/obj/$(echo "$rel" | tr / _).o"
  if [ ! -f "$o" ] || [ "$s" -nt "$o" ] || [ -n "$(find "$ROOT/kernels/src/cuda" "$ROOT/kernels/src/core" "$ROOT/kernels/src/ops" "$ROOT/kernels/include" -newer "$o" \( -name '*.h' -o -name '*.cuh' \) | head -1)" ]; then
    case $s in
      *_sm90a.cu) "$NVCC" ${FLAGS%% -gencode*} -gencode arch=compute_90a,code=sm_90a -I$ROOT/kernels/include -I$ROOT/kernels/src -c "$s" -o "$o" & ;;
      *) "$NVCC" $FLAGS -c "$s" -o "$o" & ;;
    esac
    pids+=($!)
  fi
  # two compiles at a time
  if [ ${#pids[@]} -ge 2 ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p"; done
OBJS=""
for s in $SOURCES; do rel=${s#$ROOT/kernels/}; OBJS="$OBJS $OUT/obj/$(echo "$rel" | tr / _).o"; done
"$NVCC" -cudart static -gencode arch=compute_90,code=sm_90 -o "$OUT/kernel_test" $OBJS -ldl -lpthread -Xcompiler -static-libstdc++,-static-libgcc
echo "built $OUT/kernel_test"
