#!/usr/bin/env bash
# ../shared/device/make-bundle.sh, then slims the bundle so that it and a test binary fit the device's 64 MiB carry
# limit together: no Jazzer and no fuzz targets (fuzzing runs here, never there), only the cudart/cuBLAS JNI libraries
# of bytedeco's CUDA jar, a jlink'd runtime without jlink's own compression and without the JVM's symbol table (with
# java.net.http and jdk.httpserver for the sample server's load test), the whole packed with xz.
#   usage: scripts/device-bundle.sh MODULE...     writes .device/bundle.txz, .device/run.sh (same use as before) and,
#   when the build made one, .device-ops/ (the op test and its OpenBLAS)
set -euo pipefail
cd "$(dirname "$0")/.."
JH=${JAVA_HOME:-/usr/lib/jvm/java-17-openjdk-amd64}
../shared/device/make-bundle.sh .device "$@" >/dev/null
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
tar xzf .device/bundle.tgz -C "$T" && rm .device/bundle.tgz
rm -rf "$T"/bundle/jre "$T"/bundle/lib/jazzer-*.jar
find "$T"/bundle/tests -name '*FuzzTest*.class' -delete
# bytedeco's CUDA jar: only the cudart and cuBLAS JNI libraries are used (CudaInteropTest); NPP, cuSPARSE, cuDNN, …
# are ~26 MB that kept the bundle and the op test from fitting one carry together
for j in "$T"/bundle/lib/cuda-*-linux-x86_64.jar; do
  [ -f "$j" ] || continue
  unzip -Z1 "$j" | grep -E '/libjni[^/]*\.so$' | grep -vE '/libjni(cudart|cublas)\.so$' | xargs -r zip -q -d "$j"
done
"$JH/bin/jlink" --add-modules java.base,jdk.unsupported,java.logging,java.xml,java.management,jdk.management,java.net.http,jdk.httpserver \
  --strip-debug --no-header-files --no-man-pages --output "$T"/bundle/jre
strip --strip-unneeded "$T"/bundle/jre/lib/server/libjvm.so
tar cf - -C "$T" bundle | xz -T0 -9e > .device/bundle.txz
cat > .device/run.sh <<'EOS'
#!/bin/sh
# Unpacks the bundle once per device machine, then runs: run.sh tests [junit args] | run.sh main CLASS [args]
set -e
H=$(cd "$(dirname "$0")" && pwd); U=/tmp/mamba4j-bundle
if [ ! -f "$U/.stamp" ] || [ "$H/bundle.txz" -nt "$U/.stamp" ]; then
  rm -rf "$U"; mkdir -p "$U"; tar xJf "$H/bundle.txz" -C "$U" --strip-components=1; touch "$U/.stamp"
fi
exec sh "$U/launch.sh" "$@"
EOS
chmod +x .device/run.sh
# The op test of the same build and the OpenBLAS it links, stripped and packed on their own in .device-ops/
# (scripts/device-optest.sh unpacks them on the device): an op-test call carries only .device-ops (~21 MB), and when
# the bundle and the op test together pass the 64 MiB limit, the Java and the op-test work go in two calls.
OPTEST=presets/cppbuild/linux-x86_64/bin/op_test
OBLAS=presets/target/openblas/org/bytedeco/openblas/linux-x86_64
rm -rf .device-ops .device/op_test.xz
if [ -x "$OPTEST" ]; then
  mkdir -p .device-ops
  strip -o "$T/op_test" "$OPTEST" && xz -T0 -9e -c "$T/op_test" > .device-ops/op_test.xz
  tar cf - -C "$OBLAS" libopenblas.so.0 libgfortran.so.5 libgcc_s.so.1 libquadmath.so.0 | xz -T0 -9e > .device-ops/oblas.txz
fi
size() { du -cb "$@" 2>/dev/null | tail -1 | cut -f1; }
echo "bundle: .device $(size .device) bytes, .device-ops $(size .device-ops) bytes (one carry holds at most 64 MiB in all," \
  "the tree ~3.4 MB included)"
