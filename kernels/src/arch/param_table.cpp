#include "param_table.h"

#include "core/errors.h"

#include <stdexcept>

namespace mamba {

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

const ParamInfo& ParamTable::at(int index) const {
    if (index < 0 || index >= count())
        failRange("parameter index " + std::to_string(index) + " is out of range [0, " +
                                std::to_string(count()) + ")");
    return params_[index];
}

}  // namespace mamba
