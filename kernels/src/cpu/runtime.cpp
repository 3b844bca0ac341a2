// Process-wide CPU settings and build information.
#include "blas_threads.h"
#include "core/backends.h"
#include "core/errors.h"
#include "mamba/mamba.h"
#include "thread_pool.h"

#include <cblas.h>

#include <string>

namespace mamba {

void setCpuThreads(int threads) {
    if (threads < 1 || threads > 1024) fail("threads = " + std::to_string(threads) + " must be in [1, 1024]");
    // Both are safe while other threads run ops: a running op finishes on the pool it started with, and
    // the OpenBLAS count is only applied inside the next threaded product (blas_threads.h).
    cpu::resizePool(threads);
    cpu::setBlasThreads(threads);
}

int cpuThreads() { return cpu::cpuPoolThreads(); }

std::string blasCoreName() { return openblas_get_corename(); }

std::string version() { return std::string("libmamba 0.1.0 (") + (builtWithCuda() ? "CPU + CUDA" : "CPU only") + ")"; }

}  // namespace mamba
