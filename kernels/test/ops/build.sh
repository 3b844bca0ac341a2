#!/usr/bin/env bash
# Local build of op_test (cppbuild.sh builds the same program into $PREFIX/bin/op_test for Maven):
#
#   bash kernels/test/ops/build.sh [--ref-only] [OUT_DIR]      (default OUT_DIR: <repo>/presets/cppbuild/optest, git-ignored)
#
# Compiles kernels/src/core, kernels/src/cpu (and any .cpp under kernels/src/ops) with the test files and
# links OpenBLAS. --ref-only compiles just the harness (with ref_stubs.cpp), to run `op_test --backend ref`
# before the CPU backend builds. OpenBLAS: $OPENBLAS, else the Maven-unpacked copy in presets/target.
# Extra source folders: OPTEST_SRC_DIRS="kernels/src/common ..." (relative to the repo).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
REF_ONLY=
if [ "${1:-}" = --ref-only ]; then REF_ONLY=1; shift; fi
OUT=${1:-$ROOT/presets/cppbuild/optest}
if [ -z "${OPENBLAS:-}" ]; then
  for c in "$ROOT/presets/target/openblas/org/bytedeco/openblas/linux-x86_64" \
           /work/main/presets/target/openblas/org/bytedeco/openblas/linux-x86_64; do
    [ -f "$c/include/cblas.h" ] && { OPENBLAS=$c; break; }
  done
fi
CXXFLAGS="-std=c++17 -O3 -march=x86-64-v3 -fopenmp-simd -fno-math-errno -fno-trapping-math -Wall -Wextra -Wno-unused-parameter"
INC="-I$ROOT/kernels/include -I$ROOT/kernels/src -I$ROOT/kernels/test/ops"
TESTS="harness.cpp op_cases.cpp op_cases_mamba3.cpp op_cases_sampling.cpp op_test.cpp reference.cpp reference_mamba3.cpp ref_ops.cpp"
if [ -n "$REF_ONLY" ]; then
  SOURCES=$(for t in $TESTS ref_stubs.cpp; do echo "$ROOT/kernels/test/ops/$t"; done)
  LIBS=
else
  [ -f "${OPENBLAS:-}/include/cblas.h" ] || { echo "build.sh: set OPENBLAS=DIR (holding include/cblas.h and libopenblas.so.0)" >&2; exit 2; }
  INC="$INC -I$OPENBLAS/include"
  DIRS="$ROOT/kernels/src/core $ROOT/kernels/src/cpu $ROOT/kernels/src/ops"
  for d in ${OPTEST_SRC_DIRS:-}; do DIRS="$DIRS $ROOT/$d"; done
  SOURCES="$(find $DIRS -name '*.cpp' 2>/dev/null | sort) $(for t in $TESTS; do echo "$ROOT/kernels/test/ops/$t"; done)"
  LIBS="-L$OPENBLAS -l:libopenblas.so.0 -Wl,-rpath,$OPENBLAS -lpthread -ldl"
fi
mkdir -p "$OUT/obj"
OBJS=()
pids=()
for s in $SOURCES; do
  o="$OUT/obj/$(echo "${s#$ROOT/kernels/}" | tr / _).o"
  OBJS+=("$o")
  # Rebuild when the source or any header of the tree is newer than the object.
  if [ ! -f "$o" ] || [ "$s" -nt "$o" ] || [ -n "$(find "$ROOT/kernels/src" "$ROOT/kernels/include" "$ROOT/kernels/test/ops" -name '*.h' -newer "$o" | head -1)" ]; then
    g++ $CXXFLAGS $INC -c "$s" -o "$o" &
    pids+=($!)
  fi
  if [ ${#pids[@]} -ge 2 ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p"; done
g++ -o "$OUT/op_test" "${OBJS[@]}" $LIBS
echo "build.sh: built $OUT/op_test${REF_ONLY:+ (--ref-only: run it with --backend ref)}"
