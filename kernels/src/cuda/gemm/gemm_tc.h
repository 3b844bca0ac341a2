// The deterministic tensor-core tier (gemm_tc.cu): GEMM_DETERMINISTIC's Forward product for bf16/f16 weights.
// gemm.cu is the only caller besides the tests.
#pragma once

#include "../cuda_check.h"
#include "gemv.h"

#include <cstdint>

namespace mamba::cuda {

/**
 * Whether the tensor-core tier takes this weight: 16-bit storage, whole 16-byte chunks per row (in % 8 == 0) and a
 * 16-byte aligned base. A function of the weight alone — never of the row count — so a weight's products run in
 * one tier for every M.
 */
bool tensorTierTakes(const void* w, int wdtype, int in);

/** Whether a product of `rows` rows of x needs the workspace (x rounded to W's type first): all but ≤ 16 aligned rows. */
bool tensorTierPacks(const float* x, int64_t ldx, int64_t rows);

/**
 * Tile shapes of the tier (they change speed, never bits); kAuto picks one from the shape. For tests/benchmarks.
 * kTma128x256, kFewRows and kFewRowsF32x run TMA + wgmma (gemm_tc_sm90a.cu) and exist on compute capability 9.0 only
 * (tensorTileRuns); kDecode32 and kFewRowsF32x read f32 x directly (≤ 16 aligned rows), kChain too (≤ 8 aligned rows,
 * one warp per chain, the decode tile that can fuse the rmsnorm and the conv step), the others x packed to W's type.
 */
enum class TcTile { kAuto = -1, kDecode32, k64x32, k128x128, kTma128x256, kFewRows, kFewRowsF32x, kChain, kCount };

/** The most rows the chain tile takes (the rows of one mma fragment's upper half). */
constexpr int kChainMaxRows = 8;

/**
 * Into how many parts of k every output's chain of this weight is cut on this device: 1, except on Hopper for deep
 * weights (more inputs than outputs, at least 1,024 inputs: 2, 4 or 8 parts, gemm_tc.cu's tierSplit). A function of
 * the weight's shape and the device alone.
 */
int tensorTierParts(const Exec& ex, int out, int in);

/** Whether `tile` runs on the device of `ex` (the wgmma tiles need compute capability 9.0). */
bool tensorTileRuns(const Exec& ex, TcTile tile);

/**
 * y[r, 0:out] = beta·y[r] + x[r]·Wᵀ (+ bias), W [out, in] bf16/f16 row-major (tensorTierTakes), x f32 rounded
 * to W's type (nearest even) on its way to the tensor cores, f32 accumulation.
 *
 * The numeric contract: every output element is ONE chain of k16 tensor-core steps (mma.m16n8k16 / wgmma, the
 * same rounding) over k = 0, 16, 32, … (the last chunk zero-padded past `in`), starting from +0, then + bias, then
 * + beta·y — or, for a weight that tensorTierParts cuts into P parts, P such chains over consecutive parts of k,
 * added in part order ((c₀ + c₁) + c₂ …, by the blocks of one cluster), then + bias + beta·y. Tile shapes, the row
 * count, the grid and the other rows never change that, so a row's result is batch-invariant and the same in decode,
 * prefill and forward. `workspace` (device memory, ≥ 2·in bytes) holds x rounded to W's type for the packed tiles;
 * the decode tiles (≤ 16 rows with 16-byte aligned rows) round x on chip instead.
 */
void gemmTensorTier(const Exec& ex, const float* x, int64_t ldx, int64_t rows, const void* w, int wdtype, int out,
                    int in, const float* bias, float* y, int64_t ldy, float beta, void* workspace,
                    size_t workspace_bytes, TcTile tile = TcTile::kAuto);

/**
 * Whether gemmTensorTierFused runs this product: the tier takes the weight, unsplit (tensorTierParts 1), and it is one
 * the chain tile is chosen for (one row — decode at B = 1 — of a weight whose chains' latency sets the time: gemm_tc.cu's
 * chainTakes); with a conv step its width is at most kConvEpilogueMaxWidth and its channels at most the outputs. The
 * caller checks that the buffers do not overlap.
 */
bool tensorTierFuses(const Exec& ex, int64_t rows, const void* w, int wdtype, int out, int in, const ConvEpilogue* conv);

/**
 * gemmTensorTier on x = rmsnorm(norm.x) (which it also writes to norm.y, as the rmsnorm kernel would), on the chain
 * tile — and with `conv`, decode's conv step on the outputs below conv->channels (ConvEpilogue, one row). The bits are
 * those of the rmsnorm kernel, then gemmTensorTier, then convSilu: the rmsnorm's sum order is rmsnorm_row.cuh's, the
 * conv step conv_step.cuh's, so DETERMINISTIC decode steps keep prefill's bits.
 */
void gemmTensorTierFused(const Exec& ex, int64_t rows, const void* w, int wdtype, int out, int in, const float* bias,
                         float* y, int64_t ldy, float beta, const NormPrologue& norm, const ConvEpilogue* conv);

}  // namespace mamba::cuda
