// Host-side launchers of the CUDA stages. Each lives in the .cu file named after its concept; the
// backend (cuda_backend.cu) and the kernel test program call only these.
#pragma once

#include "../common/backend.h"
#include "mamba/mamba.h"
#include "cuda_check.h"

#include <cstdint>

namespace mamba::cuda {

// ---- rmsnorm.cu ----
/** y[r] = w ⊙ x[r] / sqrt(mean(x[r]²) + eps): one block per row. */
void rmsnorm(const Exec& ex, const float* x, int64_t ldx, const float* w, int64_t rows, int d, float eps, float* y,
             int64_t ldy);

// ---- convert.cu ----
/** out = -exp(in). */
void negExp(const Exec& ex, const float* in, float* out, int64_t n);
/** n f32 → bf16 (dtype DTYPE_BF16) or f16 (DTYPE_F16), round to nearest even. */
void toLowp(const Exec& ex, const float* src, void* dst, int64_t n, int dtype);
/** Packs rows of x (stride ldx) into dst [rows, cols] in bf16/f16: the activations of a low-precision GEMM. */
void rowsToLowp(const Exec& ex, const float* x, int64_t ldx, int64_t rows, int cols, void* dst, int dtype);
/** y[r, 0:n] = beta·y[r, 0:n] + bias (beta == 0 ignores y, NaNs included). */
void biasInit(const Exec& ex, float* y, int64_t ldy, int64_t rows, int n, const float* bias, float beta);

// ---- embed.cu ----
/** out[r, :] = table[ids[r], :] for r < rows; ids are device int32, already range-checked. */
void embed(const Exec& ex, const float* table, const int32_t* ids, int64_t rows, int d, float* out);

// ---- gemv.cu ----
/** Rows up to which linear() uses our matrix-vector kernel rather than cuBLAS. */
constexpr int kGemvMaxRows = 8;
/** An rmsnorm fused in front of a gemv: the gemv's input is y = w ⊙ x / rms(x), which it also writes out. */
struct NormPrologue {
    const float* x;
    int64_t ldx;
    const float* w;
    float eps;
    float* y;
    int64_t ldy;
};
/** Widest row a fused rmsnorm + gemv takes (8 normalised rows live in shared memory). */
constexpr int kNormFuseMaxWidth = 6144;
/**
 * y[r, 0:out] = beta·y[r] + x[r]·Wᵀ (+ bias) for r < rows ≤ kGemvMaxRows, W [out, in] row-major stored as
 * f32 (wdtype DTYPE_F32/TF32), bf16 or f16; f32 accumulation. Rows are computed independently with the
 * same arithmetic whatever `rows` is, so a batch row equals the same row run alone, bit for bit.
 * With `norm`, x is first computed as rmsnorm(norm->x) inside the kernel (see gemvNormFusable).
 */
void gemv(const Exec& ex, const float* x, int64_t ldx, int rows, const void* w, int wdtype, int out, int in,
          const float* bias, float* y, int64_t ldy, float beta, const NormPrologue* norm = nullptr);
/** Whether gemv can take the rmsnorm prologue for this weight (16-byte rows, width ≤ kNormFuseMaxWidth). */
bool gemvNormFusable(const void* w, int wdtype, int in);
/** Threads that cooperate on one output of a gemv of this shape (exposed for the tests and notes). */
int gemvGroupSize(const Exec& ex, int wdtype, int out, int in, bool vectorised);
/** Forces the group size of vectorised gemvs (8 … 256; 0 restores the automatic choice). Tests only. */
void setGemvGroupOverride(int G);

// ---- conv_silu.cu ----
void convSilu(const Exec& ex, const ConvArgs& c);

// ---- selective_scan.cu ----
enum class ScanAlgo { Auto, Sequential, Chunked };
/**
 * Steps from which Auto picks the chunked scan (when the sequential one would leave the GPU idle). On the
 * H200 a small-grid sequential scan costs ~1.7 µs per step (7.06 ms for T = 4096, B = 1, 2048 channels),
 * the chunked one ~0.35 ms for the same T plus ~10 µs for its three launches: the chunked scan wins from a
 * few dozen steps; 128 keeps decode-like and short prompts on the one-launch path.
 */
constexpr int kScanChunkedMinSteps = 128;
/** The plan of a scan: which algorithm and, for the chunked one, chunk length and workspace. */
struct ScanPlan {
    bool chunked = false;
    int chunk = 0;       // steps per chunk
    int chunks = 1;
    int64_t workspace_floats = 0;
    int ns = 4, lanes = 4;  // states per lane and lanes per (row, channel)
};
ScanPlan planScan(const Exec& ex, const ScanArgs& s, ScanAlgo algo, int chunk_override = 0);
/** dt_proj fused into the scan: dt = x·Wᵀ + bias computed per (row, channel), and written to `out`. */
struct DtProjection {
    const void* w;       // [channels, rank] in wdtype storage
    int wdtype;
    const float* x;      // [rows, ldx]: δ
    int64_t ldx;
    const float* bias;   // [channels] or null
    int rank;
    float* out;          // [rows, channels]: the dt the linear would have written
    bool vec;            // set by selectiveScan
};
/** Whether a scan of this shape and plan can take the fused Δ projection (sequential, ≤ kGemvMaxRows rows). */
bool dtProjectionFusable(const ScanArgs& s, const ScanPlan& plan);
/** Runs the scan; the chunked plan needs plan.workspace_floats floats at ws; dt: the fused Δ projection. */
void selectiveScan(const Exec& ex, const ScanArgs& s, const ScanPlan& plan, float* ws,
                   const DtProjection* dt = nullptr);

}  // namespace mamba::cuda
