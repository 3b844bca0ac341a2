// The parameter table: every weight tensor's HuggingFace name, shape and offset inside ONE flat f32
// buffer. One buffer makes optimiser steps, gradient norms and snapshots single loops.
#pragma once

#include "dims.h"

#include <string>
#include <vector>

namespace mamba {

struct ParamInfo {
    std::string name;
    std::vector<int64_t> shape;
    int64_t offset;  // in floats, 16-float aligned
    int64_t size;
    bool matrix;     // a linear weight: stored also in the low-precision dtype on GPUs
    bool no_decay;   // norms, biases, A_log, D: excluded from weight decay by default
};

/** Offsets of one layer's tensors in the flat buffer (indices into ParamTable::params). */
struct LayerParams {
    int norm, in_proj, conv_w, conv_b, x_proj, dt_w, dt_b, a_log, d, out_proj;
};

class ParamTable {
public:
    explicit ParamTable(const Dims& dims);

    const std::vector<ParamInfo>& params() const { return params_; }
    int64_t totalSize() const { return total_; }
    int indexOf(const std::string& name) const;

    int input_w = -1, input_b = -1;  // -1 without input projection
    int embedding = -1, lm_head = -1;  // language models; lm_head == embedding when tied
    std::vector<LayerParams> layers;
    int norm_f = -1;

private:
    int add(const std::string& name, std::vector<int64_t> shape, bool matrix, bool no_decay);
    std::vector<ParamInfo> params_;
    int64_t total_ = 0;
};

}  // namespace mamba
