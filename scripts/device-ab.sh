#!/usr/bin/env bash
# Before/after on one device machine in one call: the bundle of the current build, and a base build's libmamba swapped
# into a copy of it (the JNI library is generated from the public header, so the header must be the same in both).
#   here:   scripts/device-ab.sh build COMMIT   an sm_90-only libmamba of COMMIT (a worktree under /tmp; ~2 min) as
#                                               .device/base/libmamba-SHORT.so.xz (~2.2 MB; SHORT = 7 hex digits)
#   device: carry [".device/bundle.txz", ".device/run.sh", ".device/base"] and run
#           bash .device/run.sh main CLASS ARGS…              the current build
#           [AB_BASE=SHORT] bash scripts/device-ab.sh main CLASS ARGS…
#                                                       a base build (same bundle, that libmamba; AB_BASE may be left
#                                                       out when one base is carried)
#           alternating them, at least twice each: fresh machines differ by several percent.
#   here:   scripts/device-ab.sh optest [COMMIT]   an sm_90-only op test of COMMIT (default HEAD) as
#                                               .device/base/op_test-SHORT.xz (~2.4 MB; SHORT = 7 hex digits), so one
#                                               carry holds the bundle, the base and op tests of several commits
#   device: bash scripts/device-ab.sh run-optest SHORT --backend cuda …   (OpenBLAS from .device-ops/oblas.txz when
#           carried, else from the bundle: run.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in
  build|optest)
    commit=$(git rev-parse --verify "${2:-HEAD}^{commit}")
    if [ "$1" = build ] && ! git diff --quiet "$commit" HEAD -- kernels/include; then
      echo "device-ab: the public header differs between $commit and HEAD: the bundle's JNI library would not match" >&2
      exit 2
    fi
    W=/tmp/mamba4j-ab-${commit:0:12}
    [ -d "$W" ] || git worktree add -f --detach "$W" "$commit" >/dev/null
    # the device is Hopper: build its architecture alone (a third of the size, half the time)
    sed -i 's/-gencode arch=compute_80,code=sm_80 //g; s/ -gencode arch=compute_90,code=compute_90//g' "$W/cppbuild.sh"
    OB=$PWD/presets/target/openblas/org/bytedeco/openblas/linux-x86_64
    [ -f "$W/out/lib/libmamba.so" ] ||
      (cd "$W" && bash cppbuild.sh install -platform=linux-x86_64 -prefix="$W/out" -openblas="$OB" > "$W/build.log" 2>&1) ||
      { tail -20 "$W/build.log" >&2; exit 1; }
    mkdir -p .device/base
    if [ "$1" = build ]; then
      out=.device/base/libmamba-${commit:0:7}.so.xz
      xz -T0 -9 -c "$W/out/lib/libmamba.so" > "$out"
      echo "device-ab: $out = $commit ($(stat -c %s "$out") bytes)"
    else
      out=.device/base/op_test-${commit:0:7}.xz
      strip -o /tmp/op_test.$$ "$W/out/bin/op_test"
      xz -T0 -9 -c /tmp/op_test.$$ > "$out"; rm -f /tmp/op_test.$$
      echo "device-ab: $out = $commit ($(stat -c %s "$out") bytes)"
    fi ;;
  run-optest)
    short=${2:?usage: device-ab.sh run-optest SHORT ARGS…}; shift 2
    N=/tmp/mamba4j-bundle
    mkdir -p /tmp/ab-oblas
    # OpenBLAS from .device-ops (device-bundle.sh packs it) when carried, else from the unpacked bundle
    if [ -z "$(ls /tmp/ab-oblas)" ] && [ -f .device-ops/oblas.txz ]; then xz -dc .device-ops/oblas.txz | tar xf - -C /tmp/ab-oblas; fi
    [ -n "$(ls /tmp/ab-oblas)" ] || [ -f "$N/.stamp" ] ||
      { echo "device-ab: carry .device-ops/oblas.txz or run .device/run.sh once first (it unpacks the bundle)" >&2; exit 2; }
    [ -x /tmp/ab-op_test-$short ] ||
      { xz -dc .device/base/op_test-$short.xz > /tmp/ab-op_test-$short && chmod +x /tmp/ab-op_test-$short; }
    [ -n "$(ls /tmp/ab-oblas)" ] || (cd /tmp/ab-oblas && python3 - "$N"/lib/openblas-*-linux-x86_64.jar <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for i in z.infolist():
        name = os.path.basename(i.filename)
        if name.startswith('libopenblas') or name.startswith('libgfortran') or name.startswith('libquadmath'):
            open(name, 'wb').write(z.read(i))
PY
    )
    LD_LIBRARY_PATH=/tmp/ab-oblas exec /tmp/ab-op_test-$short "$@" ;;
  main|tests)
    N=/tmp/mamba4j-bundle
    [ -f "$N/.stamp" ] || { echo "device-ab: run .device/run.sh once first (it unpacks the bundle)" >&2; exit 2; }
    if [ -z "${AB_BASE:-}" ]; then
      bases=(.device/base/libmamba-*.so.xz)
      [ ${#bases[@]} = 1 ] && [ -f "${bases[0]}" ] ||
        { echo "device-ab: carry one base, or name one with AB_BASE=SHORT: ${bases[*]}" >&2; exit 2; }
      AB_BASE=${bases[0]#.device/base/libmamba-}; AB_BASE=${AB_BASE%.so.xz}
    fi
    lib=.device/base/libmamba-$AB_BASE.so.xz; B=/tmp/mamba4j-base-$AB_BASE
    [ -f "$lib" ] || { echo "device-ab: no $lib" >&2; exit 2; }
    if [ ! -f "$B/.stamp" ] || [ "$lib" -nt "$B/.stamp" ] || [ "$N/.stamp" -nt "$B/.stamp" ]; then
      rm -rf "$B"; cp -r "$N" "$B"; rm -rf "$B/cache"
      xz -dc "$lib" > "$B/libmamba-base.so"
      python3 - "$B"/lib/mamba-presets-*-linux-x86_64.jar "$B/libmamba-base.so" <<'PY'
import shutil, sys, zipfile
jar, lib = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(jar) as zi, zipfile.ZipFile(jar + '.tmp', 'w', zipfile.ZIP_DEFLATED) as zo:
    for i in zi.infolist():
        zo.writestr(i, open(lib, 'rb').read() if i.filename.endswith('/libmamba.so') else zi.read(i))
shutil.move(jar + '.tmp', jar)
PY
      touch "$B/.stamp"
    fi
    exec sh "$B/launch.sh" "$@" ;;
  *) echo "usage: scripts/device-ab.sh build COMMIT | optest [COMMIT] | main CLASS ARGS… | tests ARGS… | run-optest SHORT ARGS…" >&2; exit 2 ;;
esac
