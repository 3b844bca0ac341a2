// Host-side launchers of the CUDA inference stages. Each lives in the .cu file named after its concept;
// the backend (cuda_backend.cu, gemm/gemm.cu) and the kernel test program call only these. Launchers keep
// no state: everything they need arrives in the Exec and the arguments.
#pragma once

#include "cuda_check.h"
#include "gemm/gemv.h"
#include "mamba/mamba.h"
#include "ops/ops.h"

#include <cstdint>

namespace mamba::cuda {

// ---- rmsnorm.cu ----
/** y[r] = w ⊙ x[r] / sqrt(mean(x[r]²) + eps): one block per row. */
void rmsnorm(const Exec& ex, const RmsNormArgs& a);

// ---- convert.cu ----
/** out = -exp(in). */
void negExp(const Exec& ex, const float* in, float* out, int64_t n);
/** n f32 → bf16 (dtype DTYPE_BF16) or f16 (DTYPE_F16), round to nearest even. */
void toLowp(const Exec& ex, const float* src, void* dst, int64_t n, int dtype);
/** n bf16 (DTYPE_BF16) or f16 (DTYPE_F16) values → f32 (exact). */
void fromLowp(const Exec& ex, const void* src, int dtype, float* dst, int64_t n);
/** Packs rows of x (stride ldx) into dst [rows, cols] in bf16/f16: the activations of a low-precision GEMM. */
void rowsToLowp(const Exec& ex, const float* x, int64_t ldx, int64_t rows, int cols, void* dst, int dtype);
/** y[r, 0:n] = beta·y[r, 0:n] + bias (beta == 0 ignores y, NaNs included). */
void biasInit(const Exec& ex, float* y, int64_t ldy, int64_t rows, int n, const float* bias, float beta);

// ---- embed.cu ----
/**
 * out[r, :] = table[ids[r], :] as f32 for r < rows; the table [vocab, d] is stored as f32 (`table` holds
 * floats) or bf16/f16 (dtype DTYPE_BF16/F16). ids are device int32, already range-checked.
 */
void embed(const Exec& ex, const void* table, int dtype, const int32_t* ids, int64_t rows, int d, float* out);

// ---- sample_tokens.cu ----
/** Ops::sampleTokens (core/sampling.h's rule): seven graph-capturable launches, no synchronisation. */
void sampleTokens(const Exec& ex, const SampleArgs& a);

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
/**
 * Plans a scan. With checkpoints every checkpoint_chunk steps (the training forward), the plan is the chunked scan
 * with chunks of exactly checkpoint_chunk steps from kScanChunkedMinSteps steps on (its chunk start states are the
 * checkpoints), otherwise the sequential scan in the narrow layout — a choice of T alone, so a row's training
 * results never depend on the batch or the GPU's size. ScanAlgo::Sequential forces the sequential scan.
 */
ScanPlan planScan(const Exec& ex, const ScanArgs& s, ScanAlgo algo, int chunk_override = 0, int checkpoint_chunk = 0);
/** dt_proj fused into the scan: dt = x·Wᵀ + bias computed per (row, channel), and written to `out`. */
struct DtProjection {
    const void* w;       // [channels, rank] in wdtype storage
    int wdtype;
    const float* x;      // [rows, ldx]: δ
    int64_t ldx;
    const float* bias;   // [channels] or null
    int rank;
    float* out;          // [rows, channels]: the dt the product would have written
    bool vec;            // set by selectiveScan
};
/** Widest Δ projection (dt_rank) the scan computes itself. */
constexpr int kDtFuseMaxRank = 1024;
/** Whether a scan of this shape and plan can take the fused Δ projection (sequential, ≤ kGemvMaxRows rows). */
bool dtProjectionFusable(const ScanArgs& s, const ScanPlan& plan);
/**
 * Runs the scan. The chunked plan needs plan.workspace_floats floats at ws; dt: the fused Δ projection
 * (sequential plans only); ck: record the state before every ck->chunk-th step (a plan made with that
 * checkpoint_chunk; not with dt).
 */
void selectiveScan(const Exec& ex, const ScanArgs& s, const ScanPlan& plan, float* ws,
                   const DtProjection* dt = nullptr, const ScanCheckpoints* ck = nullptr);

// ---- mamba3_scan.cu (the backward: mamba3_scan_backward.cu, train_kernels.h) ----
/** The largest headdim·d_state: one head's state is held in the registers of one thread block. */
constexpr int64_t kMamba3MaxHeadState = 16384;
/** Threads per (row, head) block at most (so that 128 registers per thread fit). */
constexpr int kMamba3MaxThreads = 512;
/** State floats per thread the forward aims at (more threads per block for short, latency-bound scans). */
constexpr int kMamba3ForwardPerThread = 16;
/** The threads of a (row, head) block (mamba3_step.cuh). */
struct Mamba3Layout {
    int L;        // lanes per row group (a power of two ≤ 32)
    int G;        // row groups per block (threads / L)
    int threads;  // a multiple of 32
};
/** Mamba3ScanArgs' column and state offsets, computed on the host (ops.h's helpers are host code). */
struct Mamba3Offsets {
    int z, x, b, c, dt, a, trap, angle;  // in_proj columns
    int64_t k, v, theta, state;          // inside one row's state; state = its size
    static Mamba3Offsets of(const Mamba3ScanArgs& s) {
        return Mamba3Offsets{s.zCol(),   s.xCol(),    s.bCol(),        s.cCol(),    s.dtCol(),
                             s.aCol(),   s.trapCol(), s.angleCol(),    s.kOffset(), s.vOffset(),
                             s.angleOffset(), s.stateSize()};
    }
};
/** A block's layout and its registers: ns states × rp rows per thread. */
struct Mamba3Shape {
    int ns, rp;
    Mamba3Layout lay;
};
Mamba3Shape mamba3Shape(int headdim, int d_state, int per_thread);
/** Steps whose state-independent work a block prepares together (mamba3_step.cuh), at most. */
constexpr int kMamba3TileSteps = 16;
/** Shared memory the forward's tile may take (bytes): no opt-in needed. */
constexpr int64_t kMamba3TileSmem = 46 * 1024;
/** Steps per tile for these arguments: the most ≤ kMamba3TileSteps (and ≤ steps) whose buffers fit `floats`. */
int mamba3TileSteps(const Mamba3ScanArgs& s, int xzw, int64_t floats);
/** Throws (fail) for arguments outside the kernels' contract, naming `op`; the backward reads no state. */
void validateMamba3(const Mamba3ScanArgs& s, const char* op, bool forward);
/** The Mamba-3 SISO scan, step by step; with ck, the whole state before every ck->chunk-th step. */
void mamba3Scan(const Exec& ex, const Mamba3ScanArgs& s, const ScanCheckpoints* ck);

// ---- mamba3_chunked.cu: the chunked (matmul) form of the same scan, for long calls ----
/** Steps per chunk of the chunked form (the checkpoint chunk must equal it for the training forward). */
constexpr int kMamba3Chunk = 64;
/**
 * Steps from which the backend takes the chunked form. The step kernel costs ~2 µs per step at the official
 * head (8.1 ms for T = 4096), so a call of a few dozen steps already gains; decode (T = 1) never takes it.
 */
constexpr int kMamba3ChunkedMinSteps = 32;
/** Whether the chunked form can run these arguments (steps, checkpoint chunk, shared memory, grid size). */
bool mamba3ChunkedUsable(const Exec& ex, const Mamba3ScanArgs& s, const ScanCheckpoints* ck);
/** Workspace floats the chunked form needs (each chunk's own state, its summary, the final k and θ). */
int64_t mamba3ChunkedWorkspace(const Mamba3ScanArgs& s);
/** The chunked form (three launches); ws holds mamba3ChunkedWorkspace(s) floats. Same contract as mamba3Scan. */
void mamba3ScanChunked(const Exec& ex, const Mamba3ScanArgs& s, const ScanCheckpoints* ck, float* ws);
// ---- mamba3_decode.cu ----
/**
 * One decode step (steps == 1) of mamba3Scan as a streaming kernel over (row, head, slice of headdim rows);
 * returns false, launching nothing, where it does not apply (gate norm, d_state > 256).
 * The state after the step is the sequential kernel's bit for bit; y may differ in the order of its sum.
 */
bool mamba3Decode(const Exec& ex, const Mamba3ScanArgs& s);

}  // namespace mamba::cuda
