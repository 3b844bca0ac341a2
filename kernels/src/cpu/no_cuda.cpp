// Device functions of a libmamba built without nvcc: every CUDA query answers "no CUDA device".
#include "core/backends.h"
#include "runtime/collective.h"
#include "mamba/mamba.h"

#include <stdexcept>
#include <string>

namespace mamba {

bool builtWithCuda() { return false; }

std::shared_ptr<Ops> newCudaBackend(int ordinal) {
    throw std::runtime_error("no CUDA device: libmamba was built without CUDA support (requested cuda:" +
                             std::to_string(ordinal) + ")");
}

void* allocPinnedHost(int ordinal, size_t) {
    newCudaBackend(ordinal);
    return nullptr;
}
void freePinnedHost(void*) noexcept {}

int cudaDeviceCount() { return 0; }
std::string cudaUnavailableReason() { return "libmamba was built without CUDA support"; }
std::string cudaDeviceName(int ordinal) {
    newCudaBackend(ordinal);
    return "";
}
int64_t cudaDeviceTotalMemory(int ordinal) {
    newCudaBackend(ordinal);
    return 0;
}
int64_t cudaDeviceFreeMemory(int ordinal) {
    newCudaBackend(ordinal);
    return 0;
}

std::string ncclUnavailable() {
    return "NCCL needs the CUDA build of libmamba: this libmamba was built without CUDA (no nvcc), so it has no "
           "NCCL communicator; on the CPU use the in-process or TCP communicator";
}
void newNcclId(signed char*) { throw std::runtime_error(ncclUnavailable()); }
std::unique_ptr<Collective> newNcclCollective(const signed char*, int, int, int, int64_t) {
    throw std::runtime_error(ncclUnavailable());
}

}  // namespace mamba
