// Only for `build.sh --ref-only`: the few library functions op_test calls, for a build without libmamba's
// objects (the harness then runs on its own plain backend: op_test --backend ref).
#include "core/backends.h"

#include <stdexcept>
#include <string>

namespace mamba {

namespace {
int threads = 1;
}

bool builtWithCuda() { return false; }
std::shared_ptr<Ops> cpuBackend() { throw std::runtime_error("op_test was built --ref-only: use --backend ref"); }
std::shared_ptr<Ops> newCudaBackend(int) { throw std::runtime_error("no CUDA device: op_test was built --ref-only"); }
int cudaDeviceCount() { return 0; }
std::string cudaUnavailableReason() { return "op_test was built --ref-only"; }
void setCpuThreads(int t) { threads = t; }
int cpuThreads() { return threads; }

}  // namespace mamba
