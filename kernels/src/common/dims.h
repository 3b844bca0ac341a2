// Derived sizes of a Mamba-1 model, computed once from a validated ModelConfig.
#pragma once

#include "mamba/mamba.h"

namespace mamba {

struct Dims {
    int d_model, d_state, d_conv, d_inner, dt_rank, xdbl, n_layers, input_dim;
    int in_width;         // width of one input position: input_dim, or d_model without input projection
    int vocab;            // > 0 for language models (token ids in, logits out)
    bool tie_embeddings;  // the LM head reuses the embedding matrix
    float eps;
    int64_t conv_state;   // floats of conv history per layer and row: d_inner * (d_conv - 1)
    int64_t ssm_state;    // floats of SSM state per layer and row: d_inner * d_state
    int64_t layer_state;  // conv_state + ssm_state
    int64_t row_state;    // one row of a State: layer_state * n_layers

    static Dims of(const ModelConfig& config);
};

}  // namespace mamba
