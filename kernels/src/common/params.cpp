#include "params.h"

namespace mamba {

ParamTable::ParamTable(const Dims& d) {
    if (d.vocab > 0) embedding = add("backbone.embeddings.weight", {d.vocab, d.d_model}, true, false);
    if (d.input_dim > 0) {
        input_w = add("input_proj.weight", {d.d_model, d.input_dim}, true, false);
        input_b = add("input_proj.bias", {d.d_model}, false, true);
    }
    for (int i = 0; i < d.n_layers; ++i) {
        const std::string p = "backbone.layers." + std::to_string(i) + ".";
        LayerParams l;
        l.norm = add(p + "norm.weight", {d.d_model}, false, true);
        l.in_proj = add(p + "mixer.in_proj.weight", {2 * d.d_inner, d.d_model}, true, false);
        l.conv_w = add(p + "mixer.conv1d.weight", {d.d_inner, 1, d.d_conv}, false, false);
        l.conv_b = add(p + "mixer.conv1d.bias", {d.d_inner}, false, true);
        l.x_proj = add(p + "mixer.x_proj.weight", {d.xdbl, d.d_inner}, true, false);
        l.dt_w = add(p + "mixer.dt_proj.weight", {d.d_inner, d.dt_rank}, true, false);
        l.dt_b = add(p + "mixer.dt_proj.bias", {d.d_inner}, false, true);
        l.a_log = add(p + "mixer.A_log", {d.d_inner, d.d_state}, false, true);
        l.d = add(p + "mixer.D", {d.d_inner}, false, true);
        l.out_proj = add(p + "mixer.out_proj.weight", {d.d_model, d.d_inner}, true, false);
        layers.push_back(l);
    }
    norm_f = add("backbone.norm_f.weight", {d.d_model}, false, true);
    if (d.vocab > 0) lm_head = d.tie_embeddings ? embedding : add("lm_head.weight", {d.vocab, d.d_model}, true, false);
}

int ParamTable::add(const std::string& name, std::vector<int64_t> shape, bool matrix, bool no_decay) {
    int64_t size = 1;
    for (int64_t s : shape) size *= s;
    params_.push_back(ParamInfo{name, std::move(shape), total_, size, matrix, no_decay});
    total_ += (size + 15) / 16 * 16;
    return static_cast<int>(params_.size()) - 1;
}

int ParamTable::indexOf(const std::string& name) const {
    for (size_t i = 0; i < params_.size(); ++i)
        if (params_[i].name == name) return static_cast<int>(i);
    return -1;
}

}  // namespace mamba
