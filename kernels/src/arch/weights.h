// How an architecture reads its weights. A model stores its tensors in one buffer: vectors (norms, biases,
// conv taps, A_log, D) always in f32, matrices in the model's storage type — so a BF16 model holds about
// 2 bytes per parameter and no f32 copy. Training reads the same tensors through a view of the f32 master
// weights (the ParamTable layout).
#pragma once

#include "ops/gemm.h"
#include "param_table.h"

#include <vector>

namespace mamba {

/** Byte offsets of every tensor inside a model's storage buffer, for one storage type. */
struct StorageLayout {
    int dtype = DTYPE_F32;
    std::vector<int64_t> byte_offset;
    int64_t bytes = 0;

    /**
     * F32/TF32: exactly the ParamTable layout (so f32 masters can alias the storage); BF16/F16: matrices
     * 2 bytes per element, vectors 4, each tensor 64-byte aligned.
     */
    static StorageLayout of(const ParamTable& table, int dtype) {
        StorageLayout s;
        s.dtype = dtype;
        const bool lowp = dtype == DTYPE_BF16 || dtype == DTYPE_F16;
        for (const ParamInfo& p : table.params()) {
            if (!lowp) {
                s.byte_offset.push_back(p.offset * 4);
                continue;
            }
            s.byte_offset.push_back(s.bytes);
            s.bytes += (p.size * (p.matrix ? 2 : 4) + 63) / 64 * 64;
        }
        if (!lowp) s.bytes = table.totalSize() * 4;
        return s;
    }
    bool lowp(const ParamInfo& p) const { return p.matrix && (dtype == DTYPE_BF16 || dtype == DTYPE_F16); }
};

/** Read access to a model's tensors (storage or f32 masters) plus the architecture's derived weights. */
struct WeightView {
    const ParamTable* table;
    const StorageLayout* layout;
    const char* base;
    const float* derived;  // e.g. -exp(A_log); laid out by the architecture

    /** A tensor stored in f32 (every vector; matrices only in F32/TF32 storage). */
    const float* vec(int index) const {
        return reinterpret_cast<const float*>(base + layout->byte_offset[index]);
    }
    /** A linear weight [out, in] in its storage type. */
    Matrix matrix(int index) const {
        const ParamInfo& p = (*table)[index];
        const void* at = base + layout->byte_offset[index];
        const int out = static_cast<int>(p.shape[0]), in = static_cast<int>(p.shape[1]);
        if (layout->lowp(p)) return Matrix{nullptr, at, layout->dtype, out, in};
        return Matrix{static_cast<const float*>(at), nullptr, layout->dtype == DTYPE_TF32 ? DTYPE_TF32 : DTYPE_F32, out, in};
    }
};

/**
 * The Matrix a backward product of weight `index` takes: the f32 masters (for F32/TF32 products and the CPU) and,
 * for BF16/F16 storage, the 2-byte copy the forward ran on (the operand of the tensor-core backward).
 */
inline Matrix trainingMatrix(const WeightView& storage, const WeightView& master, int index) {
    Matrix m = master.matrix(index);
    const Matrix s = storage.matrix(index);
    m.dtype = s.dtype;
    m.lowp = s.lowp;
    return m;
}

}  // namespace mamba
