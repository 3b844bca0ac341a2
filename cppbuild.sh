#!/usr/bin/env bash
# Builds libmamba.so (C++17 CPU backend, plus CUDA kernels when nvcc is present) and installs it with
# its public header under a prefix, for the JavaCPP preset to parse and link against.
#
#   bash cppbuild.sh install -platform=linux-x86_64 -prefix=DIR -openblas=DIR [-cuda=auto|on|off]
#
# Incremental: does nothing when the installed library is newer than every source and the flags
# did not change. CUDA: "auto" (default) builds the kernels if nvcc is found (CUDA_HOME, /usr/local/cuda
# or PATH) and prints a line saying so otherwise; the library then answers "no CUDA device".
#
# Sanitizers: MAMBA_SANITIZE=address,undefined (any -fsanitize= list) builds a CPU-only, instrumented library and
# op_test into DIR-sanitize instead of DIR, so it can never replace the normal library; scripts/sanitize.sh uses it.
set -euo pipefail

PLATFORM=linux-x86_64; PREFIX=; OPENBLAS=; CUDA=${MAMBA_CUDA:-auto}
for arg in "$@"; do
  case $arg in
    install) ;;
    -platform=*) PLATFORM=${arg#*=} ;;
    -prefix=*) PREFIX=${arg#*=} ;;
    -openblas=*) OPENBLAS=${arg#*=} ;;
    -cuda=*) CUDA=${arg#*=} ;;
    *) echo "cppbuild.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
[ "$PLATFORM" = linux-x86_64 ] || { echo "cppbuild.sh: platform $PLATFORM is not supported (linux-x86_64 only)" >&2; exit 2; }
[ -n "$PREFIX" ] || { echo "cppbuild.sh: -prefix=DIR is required" >&2; exit 2; }
SANITIZE=${MAMBA_SANITIZE:-}
if [ -n "$SANITIZE" ]; then
  case $SANITIZE in *[!a-z,_-]*) echo "cppbuild.sh: MAMBA_SANITIZE='$SANITIZE' is not a list of sanitizer names" >&2; exit 2 ;; esac
  PREFIX=${PREFIX%/}-sanitize
  CUDA=off  # the CUDA kernels are checked by compute-sanitizer (scripts/device-sanitize.sh), not by ASan
  echo "cppbuild.sh: MAMBA_SANITIZE=$SANITIZE - building an instrumented CPU-only libmamba into $PREFIX"
fi
[ -f "$OPENBLAS/include/cblas.h" ] || { echo "cppbuild.sh: -openblas=DIR must hold include/cblas.h and libopenblas.so.0 (got '$OPENBLAS')" >&2; exit 2; }

ROOT=$(cd "$(dirname "$0")" && pwd)
SRC=$ROOT/kernels
NVCC=
if [ "$CUDA" != off ]; then
  for c in "${CUDA_HOME:-}/bin/nvcc" /usr/local/cuda/bin/nvcc "$(command -v nvcc || true)"; do
    [ -n "$c" ] && [ -x "$c" ] && { NVCC=$c; break; }
  done
  [ -n "$NVCC" ] || [ "$CUDA" = auto ] || { echo "cppbuild.sh: -cuda=on but nvcc was not found" >&2; exit 1; }
  [ -n "$NVCC" ] || echo "cppbuild.sh: nvcc not found - building libmamba without CUDA (CPU only)"
fi

CXXFLAGS="-std=c++17 -O3 -fPIC -march=x86-64-v3 -fopenmp-simd -fno-math-errno -fno-trapping-math -fvisibility=hidden -Wall -Wextra -Wno-unused-parameter"
SANFLAGS=
if [ -n "$SANITIZE" ]; then
  # -O1 and frame pointers for usable stacks; every UB report is an error (the process stops at the first)
  SANFLAGS="-fsanitize=$SANITIZE -fno-sanitize-recover=all -fno-omit-frame-pointer -g"
  CXXFLAGS="${CXXFLAGS/-O3/-O1} $SANFLAGS"
fi
NVBASE="-std=c++17 -O3 -Xcompiler=-fPIC,-fvisibility=hidden --expt-relaxed-constexpr"
NVFLAGS="$NVBASE -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"
# *_sm90a.cu files hold Hopper-only instructions (wgmma): compiled for sm_90a alone, launched on 9.0 devices only.
NVFLAGS_SM90A="$NVBASE -gencode arch=compute_90a,code=sm_90a"
STAMP="$CXXFLAGS|$NVFLAGS|$NVFLAGS_SM90A|${NVCC:+cuda}|$OPENBLAS"
LIB=$PREFIX/lib/libmamba.so
if [ -f "$LIB" ] && [ -x "$PREFIX/bin/op_test" ] && [ -f "$PREFIX/.flags" ] && [ "$(cat "$PREFIX/.flags")" = "$STAMP" ] \
   && [ -z "$(find "$SRC" "$0" -newer "$LIB" -type f | head -1)" ]; then
  echo "cppbuild.sh: libmamba is up to date"
  exit 0
fi

mkdir -p "$PREFIX/lib" "$PREFIX/include" "$PREFIX/linkonly"
# A private object folder and an atomic rename of the library: two builds at once cannot clobber each other.
OBJ=$(mktemp -d "$PREFIX/obj.XXXXXX"); trap 'rm -rf "$OBJ"' EXIT
CPP_SOURCES=$(find "$SRC/src/core" "$SRC/src/ops" "$SRC/src/arch" "$SRC/src/runtime" "$SRC/src/api" "$SRC/src/cpu" \
  -name '*.cpp' | sort)
if [ -n "$NVCC" ]; then
  CPP_SOURCES=$(echo "$CPP_SOURCES" | grep -v '/no_cuda.cpp$')
  CU_SOURCES=$(find "$SRC/src/cuda" -name '*.cu' -o -name '*.cpp' | sort)
else
  CU_SOURCES=
fi

# Compile in parallel, one job per core; one line per file, so a quiet Maven build (-q) still shows progress.
JOBS=$(nproc 2>/dev/null || echo 2)
START=$(date +%s)
N_CPP=$(printf '%s\n' $CPP_SOURCES | grep -c . || true); N_CU=$(printf '%s\n' $CU_SOURCES | grep -c . || true)
echo "cppbuild.sh: compiling libmamba: $N_CPP C++ files${NVCC:+ and $N_CU CUDA files (nvcc, the slow part)} on $JOBS cores"
compile() {  # compile SOURCE
  local s=$1 o="$OBJ/$(echo "${1#$SRC/src/}" | tr / _).o"
  echo "cppbuild.sh:   ${1#$SRC/src/}"
  case $s in
    *_sm90a.cu) "$NVCC" $NVFLAGS_SM90A -I"$SRC/include" -I"$SRC/src" -c "$s" -o "$o" ;;
    *.cu|*/cuda/*.cpp) "$NVCC" $NVFLAGS -I"$SRC/include" -I"$SRC/src" -c "$s" -o "$o" ;;
    *) g++ $CXXFLAGS -I"$SRC/include" -I"$SRC/src" -I"$OPENBLAS/include" -c "$s" -o "$o" ;;
  esac
}
export -f compile; export NVCC NVFLAGS NVFLAGS_SM90A CXXFLAGS SRC OBJ OPENBLAS
printf '%s\n' $CPP_SOURCES $CU_SOURCES | xargs -P "$JOBS" -I{} bash -c 'compile {}'

LIBS="-L$OPENBLAS -l:libopenblas.so.0 -lpthread -ldl"
if [ -n "$NVCC" ]; then
  # Static cudart: at load time the library needs only libc/libstdc++; libcuda.so.1 when CUDA is first used.
  "$NVCC" -shared -cudart static -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
    -o "$OBJ/libmamba.so" "$OBJ"/*.o $LIBS -Xlinker -soname=libmamba.so -Xlinker --no-undefined
else
  g++ -shared $SANFLAGS -o "$OBJ/libmamba.so" "$OBJ"/*.o $LIBS -Wl,-soname,libmamba.so -Wl,--no-undefined
fi
mv -f "$OBJ/libmamba.so" "$LIB"
echo "cppbuild.sh: linked $LIB; compiling the op test (kernels/test/ops)"

# The backend-ops test (kernels/test/ops, run by Maven's test phase): linked from the library's objects, not
# the .so, whose -fvisibility=hidden keeps the backends' symbols out of reach; OpenBLAS found by rpath.
mkdir -p "$OBJ/optest" "$PREFIX/bin"
compile_optest() { g++ $CXXFLAGS -I"$SRC/include" -I"$SRC/src" -I"$SRC/test/ops" -I"$OPENBLAS/include" -c "$1" -o "$OBJ/optest/$(basename "$1" .cpp).o"; }
export -f compile_optest
find "$SRC/test/ops" -name '*.cpp' ! -name ref_stubs.cpp | sort | xargs -P "$JOBS" -I{} bash -c 'compile_optest {}'
if [ -n "$NVCC" ]; then
  "$NVCC" -cudart static -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
    -o "$OBJ/op_test" "$OBJ"/*.o "$OBJ"/optest/*.o $LIBS -Xlinker -rpath="$OPENBLAS"
else
  g++ $SANFLAGS -o "$OBJ/op_test" "$OBJ"/*.o "$OBJ"/optest/*.o $LIBS -Wl,-rpath,"$OPENBLAS"
fi
mv -f "$OBJ/op_test" "$PREFIX/bin/op_test"
cp -r "$SRC/include/mamba" "$PREFIX/include/"
# The preset inherits openblas_nolapack, whose link name the JNI link must resolve (see docs/architecture.md).
ln -sf "$OPENBLAS/libopenblas.so.0" "$PREFIX/linkonly/libopenblas_nolapack.so"
echo "$STAMP" > "$PREFIX/.flags"
echo "cppbuild.sh: built $LIB and $PREFIX/bin/op_test ($([ -n "$NVCC" ] && echo "with CUDA" || echo "CPU only")) in $(( $(date +%s) - START )) s"
