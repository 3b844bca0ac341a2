// Mamba-3 SISO scan on CUDA (placeholder until the kernels land).
#include "cuda_backend.h"

#include "core/errors.h"

namespace mamba::cuda {

void CudaBackend::mamba3Scan(const Mamba3ScanArgs&, const ScanCheckpoints*) { failState("mamba3Scan is not implemented on CUDA yet"); }
void CudaBackend::mamba3ScanBackward(const Mamba3ScanBackwardArgs&) { failState("mamba3ScanBackward is not implemented on CUDA yet"); }

}  // namespace mamba::cuda
