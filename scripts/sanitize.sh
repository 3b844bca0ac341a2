#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer over libmamba's CPU code:
#   1. builds an instrumented, CPU-only libmamba and op_test (MAMBA_SANITIZE=address,undefined cppbuild.sh, into
#      presets/cppbuild/linux-x86_64-sanitize: the normal library is never replaced);
#   2. runs every CPU op case of kernels/test/ops (op_test, linked from the instrumented objects; leaks checked too);
#   3. runs the mamba-api and mamba-lm test suites (fuzz targets in regression mode included) with the sanitizer runtimes
#      preloaded into every test JVM and child JVM, and the instrumented libmamba loaded in place of the packaged one.
# Needs a normal build first (mvn -B install -DskipTests). Exit 0 only when both runs pass with no sanitizer report.
#
#   scripts/sanitize.sh [SUREFIRE_ARGS...]      e.g. scripts/sanitize.sh -Dtest='Checkpoint*'
# Extra Maven arguments: MAVEN_ARGS. Reports land in target/sanitize/ (asan.<pid> / ubsan.<pid> files).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SAN=${MAMBA_SANITIZE:-address,undefined}
PLATFORM=linux-x86_64
OPENBLAS=$ROOT/presets/target/openblas/org/bytedeco/openblas/$PLATFORM
LIB=$ROOT/presets/cppbuild/$PLATFORM-sanitize
LOGS=$ROOT/target/sanitize
[ -f "$OPENBLAS/include/cblas.h" ] || { echo "sanitize.sh: run 'mvn -B install -DskipTests' first (OpenBLAS is unpacked by the build)" >&2; exit 2; }
rm -rf "$LOGS" && mkdir -p "$LOGS"

MAMBA_SANITIZE=$SAN bash cppbuild.sh install -platform=$PLATFORM -prefix="$ROOT/presets/cppbuild/$PLATFORM" -openblas="$OPENBLAS" || exit 1

# The JVM handles SIGSEGV itself (implicit null checks, safepoints): ASan must leave signals alone. Leak detection
# is off in JVMs (the JVM never frees much of what it allocates at exit); op_test, a plain program, checks leaks.
# allocator_may_return_null: TensorTest asks for 2^50 bytes to check that a failed allocation is an exception;
# ASan would abort where malloc returns null.
JVM_ASAN="detect_leaks=0:handle_segv=0:allow_user_segv_handler=1:use_sigaltstack=0:detect_stack_use_after_return=0:allocator_may_return_null=1:halt_on_error=1:log_path=$LOGS/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$LOGS/ubsan"

echo "== op_test (CPU op cases) under $SAN"
ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:log_path=$LOGS/asan" "$LIB/bin/op_test" > "$LOGS/op_test.log" 2>&1
OPS=$?
tail -2 "$LOGS/op_test.log"

echo "== mamba-api and mamba-lm tests under $SAN (instrumented libmamba from $LIB/lib)"
# Tagged leak: RSS measurements mean nothing under ASan's quarantine and shadow memory. The kill test restarts a
# sanitized JVM per kill (~3.5 s each): 15 kills instead of 200.
PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
JVM_ARGS="--enable-native-access=ALL-UNNAMED -Dorg.bytedeco.javacpp.cachedir=$ROOT/mamba-api/target/javacpp-cache -DENGINE_CACHE_DIR=$ROOT/mamba-api/target/djl-cache -Dorg.bytedeco.javacpp.pathsFirst=true -Dorg.bytedeco.javacpp.platform.preloadpath=$LIB/lib"
LD_PRELOAD="$PRELOAD" ASAN_OPTIONS="$JVM_ASAN" mvn -B ${MAVEN_ARGS:-} -pl mamba-api,mamba-lm surefire:test \
  -Dtest.jvm.args="$JVM_ARGS" -DexcludedGroups=leak -Dmamba4j.kills=15 -Dsurefire.failIfNoSpecifiedTests=false "$@" > "$LOGS/mvn.log" 2>&1
JAVA=$?
grep -E "Tests run:.*Fail" "$LOGS/mvn.log" | grep -v -- " in "   # each module's totals

# A report is an ASan ERROR or a UBSan "runtime error"; files holding only warnings (TensorTest's refused 2^50-byte
# allocation) are listed but do not count.
REPORTS=$(cat "$LOGS"/asan.* "$LOGS"/ubsan.* 2>/dev/null | grep -cE 'ERROR: AddressSanitizer|runtime error:' || true)
echo "== sanitizer errors: $REPORTS (op_test exit $OPS, maven exit $JAVA); logs in $LOGS"
for f in "$LOGS"/asan.* "$LOGS"/ubsan.*; do [ -f "$f" ] && { echo "--- $f"; head -30 "$f"; }; done
[ "$OPS" -eq 0 ] && [ "$JAVA" -eq 0 ] && [ "$REPORTS" -eq 0 ]
