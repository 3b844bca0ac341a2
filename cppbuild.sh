#!/usr/bin/env bash
# Builds libmamba.so (C++17 CPU backend, plus CUDA kernels when nvcc is present) and installs it with
# its public header under a prefix, for the JavaCPP preset to parse and link against.
#
#   bash cppbuild.sh install -platform=linux-x86_64 -prefix=DIR -openblas=DIR [-cuda=auto|on|off]
#
# Incremental: does nothing when the installed library is newer than every source and the flags
# did not change; otherwise recompiles only the objects whose source or included headers changed (objects and
# their compiler-written dependency lists are kept in PREFIX/obj, dropped when the flags change). CUDA: "auto" (default) builds the kernels if nvcc is found (CUDA_HOME, /usr/local/cuda
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
# One build at a time per prefix (they share the object folder); the library and the op test are renamed into place.
exec 9> "$PREFIX/.build.lock"
flock 9
OBJ=$PREFIX/obj
if [ ! -f "$OBJ/.flags" ] || [ "$(cat "$OBJ/.flags")" != "$STAMP" ]; then rm -rf "$OBJ"; fi
mkdir -p "$OBJ/optest"
echo "$STAMP" > "$OBJ/.flags"
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
objectOf() { echo "$OBJ/$(echo "${1#$SRC/src/}" | tr / _).o"; }
# An object is current when it is newer than its source and than every file its dependency list names.
current() {  # current OBJECT
  local o=$1 f
  [ -f "$o" ] && [ -f "$o.d" ] || return 1
  for f in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$o.d"); do [ -e "$f" ] && [ ! "$f" -nt "$o" ] || return 1; done
  return 0
}
compile() {  # compile SOURCE
  local s=$1 o
  o=$(objectOf "$1")
  current "$o" && return 0
  echo "cppbuild.sh:   ${1#$SRC/src/}"
  case $s in
    *_sm90a.cu) "$NVCC" $NVFLAGS_SM90A -I"$SRC/include" -I"$SRC/src" -MD -MF "$o.d.tmp" -c "$s" -o "$o.tmp" ;;
    *.cu|*/cuda/*.cpp) "$NVCC" $NVFLAGS -I"$SRC/include" -I"$SRC/src" -MD -MF "$o.d.tmp" -c "$s" -o "$o.tmp" ;;
    *) g++ $CXXFLAGS -I"$SRC/include" -I"$SRC/src" -I"$OPENBLAS/include" -MMD -MF "$o.d.tmp" -c "$s" -o "$o.tmp" ;;
  esac
  mv -f "$o.d.tmp" "$o.d" && mv -f "$o.tmp" "$o"
}
export -f objectOf current compile; export NVCC NVFLAGS NVFLAGS_SM90A CXXFLAGS SRC OBJ OPENBLAS
printf '%s\n' $CPP_SOURCES $CU_SOURCES | xargs -P "$JOBS" -I{} bash -c 'compile {}'
# Only the current sources' objects are linked (an object left by a deleted source is not).
OBJS=$(for s in $CPP_SOURCES $CU_SOURCES; do objectOf "$s"; done)

LIBS="-L$OPENBLAS -l:libopenblas.so.0 -lpthread -ldl"
if [ -n "$NVCC" ]; then
  # Static cudart: at load time the library needs only libc/libstdc++; libcuda.so.1 when CUDA is first used.
  "$NVCC" -shared -cudart static -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
    -o "$OBJ/libmamba.so" $OBJS $LIBS -Xlinker -soname=libmamba.so -Xlinker --no-undefined
else
  g++ -shared $SANFLAGS -o "$OBJ/libmamba.so" $OBJS $LIBS -Wl,-soname,libmamba.so -Wl,--no-undefined
fi
mv -f "$OBJ/libmamba.so" "$LIB"
echo "cppbuild.sh: linked $LIB; compiling the op test (kernels/test/ops)"

# The backend-ops test (kernels/test/ops, run by Maven's test phase): linked from the library's objects, not
# the .so, whose -fvisibility=hidden keeps the backends' symbols out of reach; OpenBLAS found by rpath.
mkdir -p "$OBJ/optest" "$PREFIX/bin"
compile_optest() {
  local o
  o="$OBJ/optest/$(basename "$1" .cpp).o"
  current "$o" && return 0
  g++ $CXXFLAGS -I"$SRC/include" -I"$SRC/src" -I"$SRC/test/ops" -I"$OPENBLAS/include" -MMD -MF "$o.d.tmp" -c "$1" -o "$o.tmp"
  mv -f "$o.d.tmp" "$o.d" && mv -f "$o.tmp" "$o"
}
export -f compile_optest
OPTEST_SOURCES=$(find "$SRC/test/ops" -name '*.cpp' ! -name ref_stubs.cpp | sort)
printf '%s\n' $OPTEST_SOURCES | xargs -P "$JOBS" -I{} bash -c 'compile_optest {}'
OPTEST_OBJS=$(for s in $OPTEST_SOURCES; do echo "$OBJ/optest/$(basename "$s" .cpp).o"; done)
if [ -n "$NVCC" ]; then
  "$NVCC" -cudart static -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
    -o "$OBJ/op_test" $OBJS $OPTEST_OBJS $LIBS -Xlinker -rpath="$OPENBLAS"
else
  g++ $SANFLAGS -o "$OBJ/op_test" $OBJS $OPTEST_OBJS $LIBS -Wl,-rpath,"$OPENBLAS"
fi
mv -f "$OBJ/op_test" "$PREFIX/bin/op_test"
cp -r "$SRC/include/mamba" "$PREFIX/include/"
# The preset inherits openblas_nolapack, whose link name the JNI link must resolve (see docs/architecture.md).
ln -sf "$OPENBLAS/libopenblas.so.0" "$PREFIX/linkonly/libopenblas_nolapack.so"
echo "$STAMP" > "$PREFIX/.flags"
echo "cppbuild.sh: built $LIB and $PREFIX/bin/op_test ($([ -n "$NVCC" ] && echo "with CUDA" || echo "CPU only")) in $(( $(date +%s) - START )) s"
