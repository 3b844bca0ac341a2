// Device functions of a libmamba built without nvcc: every CUDA query answers "no CUDA device".
#include "../common/devices.h"

#include <stdexcept>

namespace mamba {

bool builtWithCuda() { return false; }
Backend& cudaBackend(int ordinal) {
    throw std::runtime_error("no CUDA device: libmamba was built without CUDA support (requested cuda:" +
                             std::to_string(ordinal) + ")");
}
int cudaDeviceCount() { return 0; }
std::string cudaUnavailableReason() { return "libmamba was built without CUDA support"; }
std::string cudaDeviceName(int ordinal) { cudaBackend(ordinal); return ""; }
int64_t cudaDeviceTotalMemory(int ordinal) { cudaBackend(ordinal); return 0; }
int64_t cudaDeviceFreeMemory(int ordinal) { cudaBackend(ordinal); return 0; }

}  // namespace mamba
