// The parameter table: every weight tensor's HuggingFace name, shape and offset inside ONE flat f32
// layout. Training keeps master weights, gradients and both AdamW moments in that layout, so optimiser
// steps, gradient norms and snapshots are single loops. Architectures declare their tensors here; the
// table knows nothing about any architecture.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mamba {

struct ParamInfo {
    std::string name;
    std::vector<int64_t> shape;
    int64_t offset;  // in floats, 16-float aligned
    int64_t size;
    bool matrix;     // a linear weight [out, in]: stored in the model's storage type (BF16/F16 on GPUs)
    bool no_decay;   // norms, biases, A_log, D: excluded from weight decay by default
};

class ParamTable {
public:
    /** Appends a tensor; returns its index. */
    int add(const std::string& name, std::vector<int64_t> shape, bool matrix, bool no_decay);

    const std::vector<ParamInfo>& params() const { return params_; }
    const ParamInfo& operator[](int index) const { return params_[index]; }
    int count() const { return static_cast<int>(params_.size()); }
    int64_t totalSize() const { return total_; }
    /** Index of the tensor with this name, or -1. */
    int indexOf(const std::string& name) const;
    /** The tensor at index, or std::out_of_range naming the valid range. */
    const ParamInfo& at(int index) const;

private:
    std::vector<ParamInfo> params_;
    int64_t total_ = 0;
};

}  // namespace mamba
