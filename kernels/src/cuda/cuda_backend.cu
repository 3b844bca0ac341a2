// The CUDA backend (issue 4) is not written yet: models on CUDA devices are refused with a clear error.
#include "../common/devices.h"

#include <stdexcept>

namespace mamba {

Backend& cudaBackend(int ordinal) {
    throw std::runtime_error("CUDA models are not supported by this build of libmamba yet (requested cuda:" +
                             std::to_string(ordinal) + ")");
}

}  // namespace mamba
