// Configuration validation: one place, used by the C++ API and (through it) by the Java builders. The
// backbone's fields first, then each architecture's.
#include "core/errors.h"
#include "mamba/mamba.h"

#include <cmath>

namespace mamba {

namespace {
/** The integer limits of a config: the one table validateConfig and configFieldMin/Max read. */
struct FieldLimit {
    const char* field;
    int64_t lo, hi;
};
constexpr FieldLimit kLimits[] = {
    {"dModel", 1, 65536}, {"dState", 1, 256},      {"dConv", 1, 8},       {"expand", 1, 16},
    {"dInner", 1, 65536}, {"layers", 1, 1024},     {"inputDim", 0, 1 << 20}, {"dtRank", 0, 65536},
    {"vocabSize", 0, 10000000},
    // Mamba-3 SISO: headdim·d_state is one head's state, held by one GPU thread block.
    {"headdim", 1, 256},  {"ngroups", 1, 1024},    {"chunkSize", 1, 256}, {"headState", 1, 16384},
};

const FieldLimit& limitOf(const std::string& field) {
    for (const FieldLimit& l : kLimits)
        if (field == l.field) return l;
    fail("unknown config field '" + field + "'");
}

void requireRange(const char* field, int64_t value) {
    const FieldLimit& l = limitOf(field);
    if (value < l.lo || value > l.hi)
        fail(std::string(field) + " = " + std::to_string(value) + " is out of range: must be in [" + std::to_string(l.lo) +
             ", " + std::to_string(l.hi) + "]");
}

void validateMamba1(const ModelConfig& c) {
    requireRange("dState", c.d_state);
    requireRange("dConv", c.d_conv);
    requireRange("expand", c.expand);
    requireRange("dtRank", c.dt_rank);
    requireRange("dInner", static_cast<int64_t>(c.expand) * c.d_model);
}

void validateMamba3(const ModelConfig& c) {
    requireRange("dState", c.d_state);
    requireRange("expand", c.expand);
    requireRange("dInner", static_cast<int64_t>(c.expand) * c.d_model);
    requireRange("headdim", c.headdim);
    const int64_t d_inner = static_cast<int64_t>(c.expand) * c.d_model;
    if (d_inner % c.headdim != 0)
        fail("headdim = " + std::to_string(c.headdim) + " must divide dInner = expand·dModel = " + std::to_string(d_inner));
    requireRange("ngroups", c.ngroups);
    const int64_t nheads = d_inner / c.headdim;
    if (nheads % c.ngroups != 0)
        fail("ngroups = " + std::to_string(c.ngroups) + " must divide the number of heads dInner/headdim = " + std::to_string(nheads));
    requireRange("headState", static_cast<int64_t>(c.headdim) * c.d_state);
    if (c.rope_fraction != 0.5f && c.rope_fraction != 1.0f)
        fail("ropeFraction = " + std::to_string(c.rope_fraction) + " must be 0.5 or 1.0");
    if (!(c.a_floor > 0 && c.a_floor < 1)) fail("aFloor = " + std::to_string(c.a_floor) + " must be in (0, 1)");
    requireRange("chunkSize", c.chunk_size);
}
}  // namespace

int64_t configFieldMin(const std::string& field) { return limitOf(field).lo; }
int64_t configFieldMax(const std::string& field) { return limitOf(field).hi; }

void validateConfig(const ModelConfig& c) {
    if (c.arch != ARCH_MAMBA1 && c.arch != ARCH_MAMBA3_SISO)
        fail("arch = " + std::to_string(c.arch) + " is not supported: Mamba-1 (arch 1) or Mamba-3 SISO (arch 3)");
    // The backbone
    requireRange("dModel", c.d_model);
    requireRange("layers", c.n_layers);
    requireRange("inputDim", c.input_dim);
    requireRange("vocabSize", c.vocab_size);
    if (c.vocab_size > 0 && c.input_dim > 0)
        fail("inputDim = " + std::to_string(c.input_dim) + " must be 0 for a language model (vocabSize > 0): tokens are embedded");
    if (!(c.norm_eps > 0 && c.norm_eps < 1)) fail("normEps = " + std::to_string(c.norm_eps) + " must be in (0, 1)");
    if (!(c.dt_min > 0 && c.dt_min <= c.dt_max && c.dt_max < 100))
        fail("dtMin/dtMax = " + std::to_string(c.dt_min) + "/" + std::to_string(c.dt_max) +
             " must satisfy 0 < dtMin <= dtMax < 100");
    if (!(c.dt_init_floor > 0 && c.dt_init_floor < 1))
        fail("dtInitFloor = " + std::to_string(c.dt_init_floor) + " must be in (0, 1)");
    if (c.arch == ARCH_MAMBA1)
        validateMamba1(c);
    else
        validateMamba3(c);
}

}  // namespace mamba
