#!/usr/bin/env bash
# Sourced by the device scripts: unpacks the op test carried as .device/op_test.xz (scripts/device-bundle.sh packs
# the one the build made; by hand:
#   xz -T0 -c presets/cppbuild/linux-x86_64/bin/op_test > .device/op_test.xz) to $OPTEST and puts the OpenBLAS it
# links (taken from the bundle's OpenBLAS jar) on LD_LIBRARY_PATH. Run from the repo root on the device machine.
OPTEST=/tmp/op_test
bash .device/run.sh main -version >/dev/null 2>&1   # unpacks the bundle
[ -x $OPTEST ] || { xz -dc .device/op_test.xz > $OPTEST && chmod +x $OPTEST; }
mkdir -p /tmp/oblas
python3 - <<'PY'
import glob, zipfile, os
jar = glob.glob('/tmp/mamba4j-bundle/lib/openblas-*-linux-x86_64.jar')[0]
with zipfile.ZipFile(jar) as z:
    for n in z.namelist():
        if n.endswith(('.so.0', '.so.5', '.so.1')) and 'linux-x86_64/' in n:
            open('/tmp/oblas/' + os.path.basename(n), 'wb').write(z.read(n))
PY
export LD_LIBRARY_PATH=/tmp/oblas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
