// The architecture registry: the one place that maps a config's arch tag to its implementation.
#include "arch.h"

#include "core/errors.h"
#include "mamba1/mamba1.h"

namespace mamba {

std::unique_ptr<Architecture> makeArchitecture(const ModelConfig& config) {
    switch (config.arch) {
        case ARCH_MAMBA1:
            return std::make_unique<Mamba1>(config);
        default:
            fail("arch = " + std::to_string(config.arch) + " is not supported: only Mamba-1 (arch 1) is implemented");
    }
}

}  // namespace mamba
