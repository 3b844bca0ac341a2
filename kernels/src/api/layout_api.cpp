// Process-wide and model-less parts of the public API: ParamLayout, the no-op, the training query.
#include "arch/backbone.h"
#include "core/backends.h"
#include "core/errors.h"

#include <stdexcept>

namespace mamba {

// ---- ParamLayout: a Backbone's tensor table without weights or a device ----

namespace {
const Backbone& layout(void* p) { return *static_cast<const Backbone*>(p); }
}  // namespace

ParamLayout::ParamLayout(const ModelConfig& config) : impl_(new Backbone(config)) {}
ParamLayout::~ParamLayout() { delete static_cast<Backbone*>(impl_); }
int ParamLayout::count() const { return layout(impl_).table.count(); }
std::string ParamLayout::name(int index) const { return layout(impl_).table.at(index).name; }
int ParamLayout::indexOf(const std::string& name) const { return layout(impl_).table.indexOf(name); }
int ParamLayout::rank(int index) const { return static_cast<int>(layout(impl_).table.at(index).shape.size()); }
int64_t ParamLayout::dim(int index, int axis) const {
    const ParamInfo& p = layout(impl_).table.at(index);
    if (axis < 0 || axis >= static_cast<int>(p.shape.size()))
        failRange("axis " + std::to_string(axis) + " is out of range [0, " + std::to_string(p.shape.size()) + ")");
    return p.shape[axis];
}
int64_t ParamLayout::size(int index) const { return layout(impl_).table.at(index).size; }
bool ParamLayout::noDecay(int index) const { return layout(impl_).table.at(index).no_decay; }

// ---- process-wide ----

void noop() {}

bool trainingSupported(int device) {
    try {
        return openBackend(device)->capabilities().training;
    } catch (const std::exception&) {
        return false;
    }
}

}  // namespace mamba
