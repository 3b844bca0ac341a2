// Host-side launchers of the CUDA training stages (the training ops at the end of ops/ops.h). One .cu
// file per concept: train_reduce.cu (deterministic reductions shared by the others), train_norm.cu,
// train_conv.cu, train_scan.cu (the backward; the forward with checkpoints is selective_scan.cu),
// train_optim.cu, train_loss.cu. The backward products live with every other product in gemm/gemm.cu.
// The CPU backend defines the semantics.
//
// Determinism: no atomics anywhere. Every sum over rows, time steps, channels or elements is cut into
// pieces whose size is a constant of this code (never a function of the GPU or of a launch heuristic),
// each piece is summed in a fixed order, and the pieces are combined in index order. Two runs on the same
// GPU model therefore give bit-identical results.
#pragma once

#include "cuda_check.h"
#include "ops/ops.h"

#include <cstdint>

namespace mamba::cuda::train {

/**
 * Device workspaces on demand, owned by the caller (the backend): get(slot, n) returns at least n floats
 * that stay valid until the next request of the same slot. Contents are never assumed to be anything.
 * Slots: 0, 1, 2 the partial sums of the conv and scan backward (Mamba-3's backward: its chunk states, dk/dq,
 * φ and partials; 4 its norm products); 3 rmsnorm backward's per-block weight-gradient partials (and the scan
 * backward's group carries); 5 the double partials of sumOfSquares and mse; 6 embedBackward's sort; 7 columnSums
 * (called by the WeightGrad product).
 */
struct Scratch {
    void* owner;
    float* (*grow)(void* owner, int slot, int64_t floats);
    float* get(int slot, int64_t floats) const { return grow(owner, slot, floats); }
};

// ---- train_reduce.cu ----
/**
 * acc[j] += Σ_r v(r, j) for j < cols, with v = a[r, j], or a[r, j]·(b[r, j]·rs[r]) when b is not null.
 * Rows are summed in fixed slabs (in row order within a slab), the slabs in slab order. Uses scratch slot 7.
 */
void columnSums(const Exec& ex, const float* a, int64_t lda, const float* b, int64_t ldb, const float* rs, int64_t rows,
                int cols, float* acc, const Scratch& scratch);
/** Elements per partial sum of the double-precision reductions below (a constant: results never depend on the GPU). */
constexpr int64_t kSumChunk = 8192;
/** out[0] = Σ_i x[i]² (squares) or Σ_i x[i] in double: per-chunk tree sums, then the partials by one block (device). */
void sumInto(const Exec& ex, const float* x, int64_t n, bool squares, double* out, const Scratch& scratch);
/** Sums m doubles at part (device) with one block in a fixed tree; result at out (device; 0 when m = 0). */
void sumPartials(const Exec& ex, const double* part, int64_t m, double* out);
/** The optimizer's decision (ops/optimizer_control.h) by one thread on device memory. */
void optimizerControl(const Exec& ex, const OptimizerControlArgs& a);
/** x[i] *= s. */
void scale(const Exec& ex, float* x, int64_t n, float s);

// ---- train_norm.cu ----
void rmsnormBackward(const Exec& ex, const RmsNormBackwardArgs& a, const Scratch& scratch);

// ---- train_conv.cu ----
/** Time steps per thread of the conv backward: partial weight gradients per (row, tile), summed in order. */
constexpr int kConvTile = 32;
void convSiluBackward(const Exec& ex, const ConvBackwardArgs& c, const Scratch& scratch);

// ---- train_scan.cu ----
// (the forward with checkpoints is selectiveScan in selective_scan.cu, kernels.h)
void selectiveScanBackward(const Exec& ex, const ScanBackwardArgs& s, const Scratch& scratch);

// ---- mamba3_scan_backward.cu ----
// (the forward with checkpoints is mamba3Scan in mamba3_scan.cu, kernels.h). Uses scratch slots 0, 1, 2, 4 and 7.
void mamba3ScanBackward(const Exec& ex, const Mamba3ScanBackwardArgs& a, const Scratch& scratch);
// mamba3_chunked.cu: the chunked (matmul-form) backward, for checkpoint chunk kMamba3Chunk and long calls.
bool mamba3ChunkedBackwardUsable(const Exec& ex, const Mamba3ScanBackwardArgs& a);
/**
 * Everything of mamba3ScanBackward but the BCNorm backward and the bias/norm/dt_bias column sums: dz, dx, d dd_dt,
 * d dd_A, dtrap, dangles into dproj, dD and d gate_norm added; dk, dq ([B·T][H][N], before the rotation) for the rest.
 * Uses scratch slots 0 and 2.
 */
void mamba3ChunkedBackward(const Exec& ex, const Mamba3ScanBackwardArgs& a, const Scratch& scratch, float* dk, float* dq);

// ---- train_optim.cu ----
void adamw(const Exec& ex, float* p, const float* g, float* m, float* v, int64_t n, const AdamWFactors* f, bool decayed);
/** Ops::adamwGroup over the floats [begin, end) of the flat buffers (the table's first offset and last end). */
void adamwGroup(const Exec& ex, const AdamWGroupArgs& a, int64_t begin, int64_t end);

// ---- train_loss.cu ----
void mse(const Exec& ex, const float* y, const float* target, int64_t n, float scale, float* dy, double* out,
         const Scratch& scratch);
void crossEntropy(const Exec& ex, const CrossEntropyArgs& a);

// ---- train_embed.cu ----
/**
 * dtable[ids[r]] += dx[r]: the rows are sorted by id with a stable radix sort (equal ids keep row order), then
 * one block per (id, column tile) adds its rows in row order — the CPU's loop, bit for bit. Uses scratch slot 6.
 */
void embedBackward(const Exec& ex, const EmbedBackwardArgs& a, const Scratch& scratch);

}  // namespace mamba::cuda::train
