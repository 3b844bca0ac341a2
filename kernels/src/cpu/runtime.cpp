// Process-wide CPU settings and build information.
#include "../common/devices.h"
#include "../common/errors.h"
#include "thread_pool.h"

#include <cblas.h>

namespace mamba {

void setCpuThreads(int threads) {
    require(threads >= 1 && threads <= 1024, "threads = " + std::to_string(threads) + " must be in [1, 1024]");
    cpu::resizePool(threads);
    openblas_set_num_threads(threads);
}

int cpuThreads() { return cpu::pool().threads(); }

std::string blasCoreName() { return openblas_get_corename(); }

std::string version() { return std::string("libmamba 0.1.0 (") + (builtWithCuda() ? "CPU + CUDA" : "CPU only") + ")"; }

}  // namespace mamba
