// The architecture registry: the one place that maps a config's arch tag to its implementation.
#include "arch.h"

#include "core/errors.h"
#include "mamba1/mamba1.h"
#include "mamba3/mamba3.h"

namespace mamba {

std::unique_ptr<Architecture> makeArchitecture(const ModelConfig& config) {
    switch (config.arch) {
        case ARCH_MAMBA1:
            return std::make_unique<Mamba1>(config);
        case ARCH_MAMBA3_SISO:
            return std::make_unique<Mamba3>(config);
        default:
            fail("arch = " + std::to_string(config.arch) + " is not supported: Mamba-1 (arch 1) or Mamba-3 SISO (arch 3)");
    }
}

}  // namespace mamba
