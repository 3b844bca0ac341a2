// Configuration validation: one place, used by the C++ API and (through it) by the Java builders.
#include "dims.h"
#include "errors.h"

#include <cmath>

namespace mamba {

namespace {
void requireRange(const char* field, double value, double lo, double hi) {
    if (!(value >= lo && value <= hi)) {
        std::string v = std::to_string(value);
        if (std::floor(value) == value && std::fabs(value) < 1e15) v = std::to_string(static_cast<long long>(value));
        fail(std::string(field) + " = " + v + " is out of range: must be in [" + std::to_string(static_cast<long long>(lo)) +
             ", " + std::to_string(static_cast<long long>(hi)) + "]");
    }
}
}  // namespace

void validateConfig(const ModelConfig& c) {
    if (c.arch != ARCH_MAMBA1)
        fail("arch = " + std::to_string(c.arch) + " is not supported: only Mamba-1 (arch 1) is implemented");
    requireRange("dModel", c.d_model, 1, 65536);
    requireRange("dState", c.d_state, 1, 256);
    requireRange("dConv", c.d_conv, 1, 8);
    requireRange("expand", c.expand, 1, 16);
    requireRange("layers", c.n_layers, 1, 1024);
    requireRange("inputDim", c.input_dim, 0, 1 << 20);
    requireRange("dtRank", c.dt_rank, 0, 65536);
    requireRange("vocabSize", c.vocab_size, 0, 10000000);
    if (c.vocab_size > 0 && c.input_dim > 0)
        fail("inputDim = " + std::to_string(c.input_dim) + " must be 0 for a language model (vocabSize > 0): tokens are embedded");
    if (static_cast<int64_t>(c.expand) * c.d_model > 65536)
        fail("dInner = expand * dModel = " + std::to_string(static_cast<int64_t>(c.expand) * c.d_model) +
             " is out of range: must be <= 65536");
    if (!(c.norm_eps > 0 && c.norm_eps < 1)) fail("normEps = " + std::to_string(c.norm_eps) + " must be in (0, 1)");
    if (!(c.dt_min > 0 && c.dt_min <= c.dt_max && c.dt_max < 100))
        fail("dtMin/dtMax = " + std::to_string(c.dt_min) + "/" + std::to_string(c.dt_max) +
             " must satisfy 0 < dtMin <= dtMax < 100");
    if (!(c.dt_init_floor > 0 && c.dt_init_floor < 1))
        fail("dtInitFloor = " + std::to_string(c.dt_init_floor) + " must be in (0, 1)");
}

Dims Dims::of(const ModelConfig& c) {
    validateConfig(c);
    Dims d;
    d.d_model = c.d_model;
    d.d_state = c.d_state;
    d.d_conv = c.d_conv;
    d.d_inner = c.expand * c.d_model;
    d.dt_rank = c.dt_rank > 0 ? c.dt_rank : (c.d_model + 15) / 16;
    d.xdbl = d.dt_rank + 2 * c.d_state;
    d.n_layers = c.n_layers;
    d.input_dim = c.input_dim;
    d.in_width = c.input_dim > 0 ? c.input_dim : c.d_model;
    d.vocab = c.vocab_size;
    d.tie_embeddings = c.tie_embeddings;
    d.eps = c.norm_eps;
    d.conv_state = static_cast<int64_t>(d.d_inner) * (d.d_conv - 1);
    d.ssm_state = static_cast<int64_t>(d.d_inner) * d.d_state;
    d.layer_state = d.conv_state + d.ssm_state;
    d.row_state = d.layer_state * d.n_layers;
    return d;
}

}  // namespace mamba
