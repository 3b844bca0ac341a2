// Mamba-3 SISO scan on the CPU (placeholder until the kernels land).
#include "cpu_backend.h"

#include "core/errors.h"

namespace mamba::cpu {

void CpuBackend::mamba3Scan(const Mamba3ScanArgs&, const ScanCheckpoints*) { failState("mamba3Scan is not implemented on the CPU yet"); }
void CpuBackend::mamba3ScanBackward(const Mamba3ScanBackwardArgs&) { failState("mamba3ScanBackward is not implemented on the CPU yet"); }

}  // namespace mamba::cpu
