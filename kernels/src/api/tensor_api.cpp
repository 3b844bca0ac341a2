// mamba::Tensor: an owning device (or host) buffer with a dtype and a shape.
#include "core/backends.h"
#include "core/errors.h"
#include "runtime/model.h"

#include <vector>

namespace mamba {

class TensorImpl {
public:
    TensorImpl(std::shared_ptr<Ops> ops, int device, int dtype, std::vector<int64_t> shape, int64_t size)
        : ops(std::move(ops)), device(device), dtype(dtype), shape(std::move(shape)), size(size),
          bytes(size * elementBytes(dtype)), data(*this->ops, (bytes + 3) / 4) {}

    static int64_t elementBytes(int dtype) { return dtype == DTYPE_BF16 || dtype == DTYPE_F16 ? 2 : 4; }

    std::shared_ptr<Ops> ops;  // declared first: outlives data
    int device, dtype;
    std::vector<int64_t> shape;
    int64_t size, bytes;
    Buffer data;
};

namespace {
TensorImpl* makeTensor(int device, int dtype, const int64_t* shape, int rank) {
    require(dtype >= DTYPE_F32 && dtype <= DTYPE_F16, "dtype code " + std::to_string(dtype) + " is unknown");
    require(rank >= 0 && rank <= 8, "rank = " + std::to_string(rank) + " must be in [0, 8]");
    require(rank == 0 || shape != nullptr, "shape is null");
    std::vector<int64_t> dims(shape, shape + rank);
    int64_t size = 1;
    for (int64_t d : dims) {
        require(d >= 0, "negative dimension " + std::to_string(d));
        require(d == 0 || size <= (int64_t{1} << 60) / d, "tensor shape overflows");
        size *= d;
    }
    return new TensorImpl(openBackend(device), device, dtype, std::move(dims), size);
}

void requireFloats(const TensorImpl& t, int64_t count) {
    require(t.dtype == DTYPE_F32 || t.dtype == DTYPE_TF32, "float copies need an F32 tensor (use the byte copies)");
    requireLength("tensor copy", count, t.size);
}

void requireWholeFloats(const TensorImpl& t, int64_t bytes) {
    require(bytes == t.bytes, "byte copy of " + std::to_string(bytes) + " bytes, tensor holds " + std::to_string(t.bytes));
    require(bytes % 4 == 0, "byte copies move whole 4-byte words: " + std::to_string(bytes) + " bytes");
}
}  // namespace

Tensor::Tensor(int device, int dtype, const int64_t* shape, int rank) : impl_(makeTensor(device, dtype, shape, rank)) {}
Tensor::~Tensor() { delete impl_; }
int Tensor::device() const { return impl_->device; }
int Tensor::dtype() const { return impl_->dtype; }
int Tensor::rank() const { return static_cast<int>(impl_->shape.size()); }
int64_t Tensor::dim(int axis) const {
    if (axis < 0 || axis >= rank()) failRange("axis " + std::to_string(axis) + " is out of range [0, " + std::to_string(rank()) + ")");
    return impl_->shape[axis];
}
int64_t Tensor::size() const { return impl_->size; }
int64_t Tensor::bytes() const { return impl_->bytes; }
void* Tensor::data() const { return impl_->data.data(); }
// Every Tensor copy completes before it returns: a tensor has its own backend context, and a model that reads
// it runs on another one.
void Tensor::zero() {
    impl_->ops->zero(impl_->data.data(), impl_->data.size());
    impl_->ops->synchronize();
}

void Tensor::copyFromHost(const float* src, int64_t count) {
    requireFloats(*impl_, count);
    require(src != nullptr, "source is null");
    impl_->ops->upload(impl_->data.data(), src, count);
    impl_->ops->synchronize();
}

void Tensor::copyToHost(float* dst, int64_t count) const {
    requireFloats(*impl_, count);
    require(dst != nullptr, "destination is null");
    impl_->ops->download(dst, impl_->data.data(), count);
}

void Tensor::copyFromHostBytes(const void* src, int64_t bytes) {
    requireWholeFloats(*impl_, bytes);
    require(src != nullptr, "source is null");
    impl_->ops->upload(impl_->data.data(), static_cast<const float*>(src), bytes / 4);
    impl_->ops->synchronize();
}

void Tensor::copyToHostBytes(void* dst, int64_t bytes) const {
    requireWholeFloats(*impl_, bytes);
    require(dst != nullptr, "destination is null");
    impl_->ops->download(static_cast<float*>(dst), impl_->data.data(), bytes / 4);
}

void Model::stepTensors(State& state, const Tensor& x, Tensor& y) {
    StateImpl& s = *state.impl();
    impl_->checkState(s);
    for (const TensorImpl* t : {x.impl(), y.impl()}) {
        require(t->device == impl_->device, "tensors must live on the model's device");
        require(t->dtype == DTYPE_F32, "step tensors must be F32");
    }
    requireLength("x tensor", x.size(), static_cast<int64_t>(s.batch) * impl_->backbone.dims.in_width);
    requireLength("y tensor", y.size(), static_cast<int64_t>(s.batch) * impl_->backbone.dims.d_model);
    impl_->launch(s.data.data(), ModelImpl::Input{static_cast<const float*>(x.data()), nullptr}, s.batch, 1,
                  static_cast<float*>(y.data()), false);
    impl_->ops->synchronize();
}

}  // namespace mamba
