// Device discovery and the CUDA backend factory. Implemented by cuda/devices.cu when libmamba is
// built with nvcc, and by cpu/no_cuda.cpp otherwise.
#pragma once

#include "backend.h"
#include "mamba/mamba.h"

#include <string>

namespace mamba {

/** True when libmamba was compiled with CUDA support. */
bool builtWithCuda();
/** The CUDA backend for an ordinal; throws std::runtime_error("no CUDA device …") when unusable. */
Backend& cudaBackend(int ordinal);

}  // namespace mamba
