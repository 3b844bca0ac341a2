// mamba::HostBuffer: host memory for a device's large transfers, page-locked for CUDA devices where the driver grants it.
#include "core/backends.h"
#include "core/errors.h"
#include "mamba/mamba.h"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <string>

namespace mamba {

namespace {
constexpr size_t kAlign = 64;  // plain memory: a cache line, as OpenBLAS and the CPU kernels like it
}

HostBuffer::HostBuffer(int device, int64_t bytes) : data_(nullptr), bytes_(bytes), pinned_(false) {
    require(bytes >= 0, "HostBuffer: bytes = " + std::to_string(bytes) + " is negative");
    require(device >= DEVICE_CPU, "HostBuffer: device code " + std::to_string(device) + " is unknown");
    const size_t n = static_cast<size_t>(bytes);
    if (device != DEVICE_CPU) {
        data_ = allocPinnedHost(device, n);
        pinned_ = data_ != nullptr;
    }
    if (!data_) {
        data_ = std::aligned_alloc(kAlign, (std::max<size_t>(n, 1) + kAlign - 1) / kAlign * kAlign);
        if (!data_) throw std::bad_alloc();
    }
}

HostBuffer::~HostBuffer() {
    if (pinned_) freePinnedHost(data_);
    else std::free(data_);
}

void* HostBuffer::data() const { return data_; }
int64_t HostBuffer::bytes() const { return bytes_; }
bool HostBuffer::pinned() const { return pinned_; }

}  // namespace mamba
