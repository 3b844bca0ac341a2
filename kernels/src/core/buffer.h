// An owning f32 buffer in a backend's memory (RAII), growable for workspaces. The backend must outlive it.
#pragma once

#include "ops/ops.h"

#include <utility>

namespace mamba {

class Buffer {
public:
    Buffer() = default;
    Buffer(Ops& be, int64_t n) : be_(&be), data_(n > 0 ? be.alloc(n) : nullptr), size_(n) {}
    ~Buffer() { reset(); }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    Buffer(Buffer&& o) noexcept { swap(o); }
    Buffer& operator=(Buffer&& o) noexcept { reset(); swap(o); return *this; }

    float* data() const { return data_; }
    int64_t size() const { return size_; }

    /** Makes room for at least n floats; contents are not preserved when it grows. Returns true if it grew. */
    bool ensure(Ops& be, int64_t n) {
        if (n <= size_) return false;
        Buffer bigger(be, n);
        *this = std::move(bigger);
        return true;
    }

private:
    void reset() noexcept {
        if (data_) be_->release(data_);
        data_ = nullptr;
        size_ = 0;
    }
    void swap(Buffer& o) noexcept {
        std::swap(be_, o.be_);
        std::swap(data_, o.data_);
        std::swap(size_, o.size_);
    }
    Ops* be_ = nullptr;
    float* data_ = nullptr;
    int64_t size_ = 0;
};

}  // namespace mamba
