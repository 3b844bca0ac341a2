#!/usr/bin/env bash
# Sourced by the device scripts: unpacks the op test carried in .device-ops/ (scripts/device-bundle.sh packs the one
# the build made, and the OpenBLAS it links) to $OPTEST and puts that OpenBLAS on LD_LIBRARY_PATH. Needs no Java
# bundle, so an op-test call carries only .device-ops. Run from the repo root on the device machine.
OPTEST=/tmp/op_test
[ -x $OPTEST ] || { xz -dc .device-ops/op_test.xz > $OPTEST && chmod +x $OPTEST; }
mkdir -p /tmp/oblas
[ -f /tmp/oblas/libopenblas.so.0 ] || xz -dc .device-ops/oblas.txz | tar xf - -C /tmp/oblas
export LD_LIBRARY_PATH=/tmp/oblas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
