// Seeded paper initialisation of a Mamba-1 parameter table (state-spaces/mamba's mamba_simple.py).
#pragma once

#include "params.h"

#include <vector>

namespace mamba {

/** Fills `host` (ParamTable::totalSize floats) deterministically from `seed`. */
void initMamba1(const ModelConfig& config, const Dims& dims, const ParamTable& table, int64_t seed, float* host);

}  // namespace mamba
