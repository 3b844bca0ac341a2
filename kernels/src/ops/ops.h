// The ops layer: the contract between the architectures (src/arch) and the backends (src/cpu, src/cuda).
//
// Every op is a fused stage with an explicit argument struct, so a backend can keep data in registers or
// cache inside a stage. Fusions that span two stages are NAMED ops (normLinear, selectiveScan with its Δ
// projection) that a backend may implement in one kernel; nothing is fused behind the caller's back.
// Every matrix product goes through ONE dispatch point, gemm() (gemm.h), which receives the storage type
// and the GemmMode. Pointers are backend memory (host for CPU, device for CUDA); buffers are row-major f32
// unless a Matrix says otherwise.
//
// Determinism rule for every op used by training: no atomics, every reduction over rows, steps or blocks
// in a fixed order whose pieces are constants of the code (never of the thread count or the GPU).
#pragma once

#include "gemm.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace mamba {

/** What a backend can do; the runtime asks instead of trying and catching. */
struct Capabilities {
    bool host = false;          // buffers are host memory (upload/download are plain copies)
    bool training = false;      // the backward, optimiser and loss ops exist
    bool graphs = false;        // beginCapture/endCapture/replay record and replay launches
    bool lowp_storage = false;  // products with BF16/F16/TF32 weights (every backend converts and embeds them)
    // The most logits a language model's loss keeps at once (BackboneRunner::lmBlockRows): bigger blocks of rows
    // make the head's products more efficient, smaller ones save memory.
    int64_t logits_block_floats = int64_t{1} << 24;
    // BF16/F16 products round their f32 operands to the weight's type (CUDA; the CPU keeps f32 operands): a producer
    // that hands linearBackward dy or x already rounded (Gemm::a16 / b16) then gives the same bits without a packing
    // pass, and a forward product can leave its rounded x for the weight gradient (Gemm::keep16).
    bool rounds_backward_operands = false;
};

/**
 * An op's output written rounded to a 2-byte type (DTYPE_BF16/F16, round to nearest even) instead of in f32: for a
 * value whose only reader is a product that rounds it anyway (roundsOperandsOf) and takes it as Gemm::a16 — a
 * gradient, or an activation the rounded training tape keeps — the producer rounds as it writes, so no packing pass
 * re-reads the f32 values. Row r of the output at data + r·ld elements. Unset (data null) means the f32 output.
 */
struct Rounded16 {
    void* data = nullptr;
    int64_t ld = 0;
    int dtype = DTYPE_BF16;
};

/** y[r] = w ⊙ x[r] / sqrt(mean(x[r]²) + eps) for r < rows. */
struct RmsNormArgs {
    const float* x;
    int64_t ldx;
    const float* w;  // [d]
    int64_t rows;
    int d;
    float eps;
    float* y;
    int64_t ldy;
    Rounded16 y16{};  // or y written rounded (y null): the next product's x (Gemm::a16), as Mamba-1's rounded tape keeps it
};

/** Backward of rmsnorm: dx = beta·dx + ∂L/∂x; dw += Σ_r dy ⊙ x̂ (x̂ = x / rms), rows in order. */
struct RmsNormBackwardArgs {
    const float* x;
    int64_t ldx;
    const float* w;
    const float* dy;
    int64_t lddy;
    int64_t rows;
    int d;
    float eps;
    float* dx;
    int64_t lddx;
    float beta;
    float* dw;
};

/** Causal depthwise conv over T steps with carried history, then SiLU. */
struct ConvArgs {
    const float* x;          // [B*T rows, ldx]: the conv branch of in_proj's output
    int64_t ldx;
    const float* w;          // [channels, width]
    const float* bias;       // [channels]
    float* history;          // per row b: [channels, width-1], oldest first; read and rewritten
    int64_t history_stride;  // floats between rows of history
    float* u;                // out: [B*T, ldu] = SiLU(conv)
    int64_t ldu;
    int batch, steps, channels, width;
    Rounded16 u16{};         // also u rounded, [B*T, u16.ld] (optional: the next product's x, the tape's copy)
};

/** Backward of convSilu. Recomputes the conv output from x and the starting history. */
struct ConvBackwardArgs {
    const float* x;            // [B*T, ldx]: the forward's conv input
    int64_t ldx;
    const float* history;      // per row b: [channels, width-1] as it was BEFORE the forward (oldest first)
    int64_t history_stride;
    const float* w;            // [channels, width]
    const float* bias;         // [channels]
    const float* du;           // [B*T, ldu]: gradient of SiLU's output u
    int64_t ldu;
    float* dx;                 // out: [B*T, lddx] (overwritten)
    int64_t lddx;
    float* dw;                 // [channels, width] += (rows summed in row order)
    float* dbias;              // [channels] +=
    int batch, steps, channels, width;
    // State carry (optional; null = none), per row b at + b·dhistory_stride, [channels, width-1] like history:
    const float* dhistory_end;  // ∂L/∂(history after the last step), added to the gradients of the inputs it holds
    float* dhistory;            // out: ∂L/∂(history before step 0) (overwritten)
    int64_t dhistory_stride;
    Rounded16 dx16{};           // or dx rounded (then dx is null): [B*T, dx16.ld]
};

/**
 * The Mamba-1 selective scan: Δ = softplus(dt) → discretise → h_t = exp(Δ·A)·h_{t-1} + Δ·u_t·B_t →
 * y_t = h_t·C_t + D·u_t → out = y · SiLU(z), with h carried in and out.
 */
struct ScanArgs {
    const float* dt;      // [B*T, channels]: dt_proj output, before softplus (and before dt_bias when given)
    const float* a;       // [channels, d_state] = -exp(A_log)
    const float* bc;      // [B*T, ldbc]: B_t at bc[0..d_state), C_t at bc[d_state..2*d_state)
    int64_t ldbc;
    const float* u;       // [B*T, channels]
    const float* z;       // [B*T, ldz]: the gate branch
    int64_t ldz;
    const float* d_skip;  // [channels]
    float* h;             // per row b: [channels, d_state]; read and rewritten
    int64_t h_stride;
    float* out;           // [B*T, channels]: y · SiLU(z); or null with out16
    int batch, steps, channels, d_state;
    Rounded16 out16{};    // or the output rounded, [B*T, out16.ld] (the next product's x, the tape's copy)
    /**
     * One algorithm for every batch size and length (GemmMode::Deterministic): a backend may not pick a faster
     * layout or a chunked scan by shape, so a row's outputs do not depend on its batch and a prefill of T steps
     * equals T decode steps bit for bit.
     */
    bool shape_independent = false;
    // dt's bias (optional, [channels]): Δ = softplus(dt + dt_bias). Mamba-1 adds dt_proj's bias here, as the reference
    // kernels' delta_bias does, rather than in the product: a bias in a large product costs a pass over its output.
    const float* dt_bias = nullptr;
};

/**
 * Where the training forward keeps SSM states for backward: the state of every row before steps 0, chunk,
 * 2·chunk, … ([batch][ceil(steps/chunk)][channels, d_state]). Backward recomputes the states in between.
 */
struct ScanCheckpoints {
    float* data;
    int chunk;
};

/** Backward of the selective scan: softplus, scan from the checkpoints, D skip and the SiLU(z) gate. */
struct ScanBackwardArgs {
    const float* dt;           // [B*T, channels]: forward's dt (before softplus and dt_bias)
    const float* a;            // [channels, d_state] = -exp(A_log)
    const float* bc;           // [B*T, ldbc]: B_t then C_t
    int64_t ldbc;
    const float* u;            // [B*T, channels]
    const float* z;            // [B*T, ldz]
    int64_t ldz;
    const float* d_skip;       // [channels]
    const float* checkpoints;  // as written by selectiveScan's ScanCheckpoints
    int chunk;
    const float* dout;         // [B*T, channels]: gradient of the gated output
    float* ddt;                // out: [B*T, channels] gradient of the pre-softplus dt (overwritten)
    float* dbc;                // out: [B*T, lddbc]: dB_t then dC_t (overwritten)
    int64_t lddbc;
    float* du;                 // out: [B*T, channels] (overwritten): D·dy + Δ·Σ G·B
    float* dz;                 // out: [B*T, lddz] (overwritten)
    int64_t lddz;
    float* da_log;             // [channels, d_state] += (the gradient w.r.t. A_log, rows summed in row order)
    float* dd_skip;            // [channels] +=
    int batch, steps, channels, d_state;
    // State carry (optional; null = none), per row b at + b·dh_stride, [channels, d_state] like h:
    const float* dh_end;       // ∂L/∂h after the last step: the starting value of the reverse carry
    float* dh_start;           // out: ∂L/∂h before step 0 (overwritten)
    int64_t dh_stride;
    // Or ddt / dz rounded (then that f32 output is null): [B*T, ld] each.
    Rounded16 ddt16{}, dz16{};
    // dt's bias gradient (optional): dt_bias[channels] += Σ over rows of ddt (fixed order per backend). The scan owns
    // it because it is the one op that holds ddt in f32: the product that reads ddt may only see it rounded.
    float* ddt_bias = nullptr;
    const float* dt_bias = nullptr;  // the forward's ScanArgs::dt_bias (optional): Δ = softplus(dt + dt_bias)
};

/**
 * The Mamba-3 SISO mixer between in_proj and out_proj (the math: /work/shared/reference/mamba3-siso.md §3;
 * the layout of one in_proj output row, in this order: [z | x | B | C | dd_dt | dd_A | trap | angles]).
 * Per row b, step t, head h (group g = h / (nheads / ngroups)):
 *   B̂, Ĉ = RMSNorm_ds(B_g, C_g; b_norm, c_norm, eps 1e-5)            (per group, over d_state)
 *   Δ = softplus(dd_dt + dt_bias), A = min(−ht(dd_A), −a_floor), σ = sigmoid(trap)
 *   α = exp(A·Δ), β = α·Δ·(1−σ), γ = σ·Δ
 *   θ[a] = wrap_2π(θ[a] + π·tanh(angles[a])·Δ)                          (a < nangles, f32, wrapped every step)
 *   k = rot_θ(B̂ + b_bias[h]), q = rot_θ(Ĉ + c_bias[h])                 (pairs (2a, 2a+1) rotated, the rest not)
 *   S = α·S + β·v_prev ⊗ k_prev + γ·x ⊗ k;  k_prev = k, v_prev = x       (S: [headdim, d_state])
 *   y = S·q + D[h]·x
 *   out = y ⊙ SiLU(z)   or, with gate_norm,   gate_norm ⊙ y / sqrt(mean_head(y²) + 1e-5) ⊙ SiLU(z)
 * The state of one row, in this order: S [nheads, headdim, d_state], k_prev [nheads, d_state],
 * v_prev [nheads, headdim], θ [nheads, nangles] (Mamba3ScanArgs::stateSize()).
 */
struct Mamba3ScanArgs {
    const float* proj;       // [B*T, ldproj]: in_proj output
    int64_t ldproj;
    const float* dt_bias;    // [nheads]
    const float* b_bias;     // [nheads, d_state]
    const float* c_bias;     // [nheads, d_state]
    const float* b_norm;     // [d_state]
    const float* c_norm;     // [d_state]
    const float* d_skip;     // [nheads]
    const float* gate_norm;  // [nheads·headdim], or null: the plain SiLU gate
    float a_floor;
    float* state;            // per row b (at + b·state_stride): read and rewritten
    int64_t state_stride;
    float* out;              // [B*T, ldout]: the gated output, nheads·headdim wide
    int64_t ldout;
    int batch, steps, nheads, headdim, d_state, ngroups, nangles;

    int dInner() const { return nheads * headdim; }
    // Column offsets of the in_proj fields.
    int zCol() const { return 0; }
    int xCol() const { return dInner(); }
    int bCol() const { return 2 * dInner(); }
    int cCol() const { return 2 * dInner() + ngroups * d_state; }
    int dtCol() const { return 2 * dInner() + 2 * ngroups * d_state; }
    int aCol() const { return dtCol() + nheads; }
    int trapCol() const { return dtCol() + 2 * nheads; }
    int angleCol() const { return dtCol() + 3 * nheads; }
    int projWidth() const { return angleCol() + nangles; }
    // Offsets inside one row's state.
    int64_t kOffset() const { return int64_t(nheads) * headdim * d_state; }
    int64_t vOffset() const { return kOffset() + int64_t(nheads) * d_state; }
    int64_t angleOffset() const { return vOffset() + int64_t(nheads) * headdim; }
    int64_t stateSize() const { return angleOffset() + int64_t(nheads) * nangles; }
};

/**
 * Backward of mamba3Scan (with dstate null the gradient of the starting state is dropped). The forward's
 * inputs are in `fwd` (fwd.state and fwd.out are not read); the states come from the checkpoints the
 * training forward recorded (ScanCheckpoints: the whole row state, stateSize() floats, before steps 0,
 * chunk, 2·chunk, …, laid out [batch][ceil(steps/chunk)][stateSize]); states in between are recomputed.
 */
struct Mamba3ScanBackwardArgs {
    Mamba3ScanArgs fwd;
    const float* checkpoints;
    int chunk;
    const float* dout;       // [B*T, lddout]: gradient of the gated output
    int64_t lddout;
    float* dproj;            // out: [B*T, lddproj], every in_proj field (overwritten)
    int64_t lddproj;
    // Parameter gradients, added (+=) with rows summed in a fixed order. d_gate_norm only with fwd.gate_norm.
    float *d_dt_bias, *d_b_bias, *d_c_bias, *d_b_norm, *d_c_norm, *d_d_skip, *d_gate_norm;
    // State carry (optional; null = none), per row b at + b·dstate_stride, the whole state (stateSize() floats:
    // S, k_prev, v_prev, θ). θ's wrap to [0, 2π) has derivative 1.
    const float* dstate_end;  // ∂L/∂(state after the last step): the starting values of the reverse carries
    float* dstate;            // out: ∂L/∂(state before step 0) (overwritten)
    int64_t dstate_stride;
};

/** One AdamW update (PyTorch semantics) of n parameters: decoupled decay, bias-corrected moments. */
struct AdamWArgs {
    float lr, beta1, beta2, eps, weight_decay;
    float bias_correction1, bias_correction2;  // 1 - beta^step
    float grad_scale;                          // gradient multiplier (clipping, loss-scale undo), applied first
};

/**
 * AdamW's per-step constants as the kernels use them, and the step's decision. It lives in backend memory, so a
 * captured training step reads each replay's values: the host writes the constants (adamwFactors) before the
 * step, optimizerControl writes grad_scale and skip.
 */
struct AdamWFactors {
    float step;          // lr / (1 − β1^t)
    float inv_sqrt_bc2;  // 1 / sqrt(1 − β2^t)
    float decay[2];      // [0] 1 − lr·wd (decayed tensors), [1] 1 (the others)
    float beta1, beta2, c1, c2, eps;  // c = 1 − β
    float grad_scale;    // gradient multiplier (clipping, loss-scale undo), applied first
    float skip;          // non-zero: no update (parameters and moments stay)
    float pad;
};

/**
 * One tensor of a grouped AdamW step (Ops::adamwGroup), in backend memory (uploaded as floats: 32 bytes, no padding).
 */
struct AdamWTensor {
    int64_t offset;      // its first float in the flat p / g / m / v (a multiple of 4: ParamTable aligns to 16)
    int64_t n;           // floats
    int64_t store_byte;  // where its copy starts in AdamWGroupArgs::store, in bytes (a multiple of 8); −1: no copy
    int32_t decayed;     // non-zero: decay[0] (weight decay), else decay[1]
    int32_t store_dtype; // the copy's type: DTYPE_BF16 / DTYPE_F16 (rounded to nearest even) or DTYPE_F32
};
static_assert(sizeof(AdamWTensor) == 32, "AdamWTensor is uploaded as 8 floats");

/**
 * AdamW over every tensor of a flat parameter set in one call: each tensor as Ops::adamw(p + offset, …, decayed),
 * then its values (updated, or as they were on a skipped step) copied into the model's storage where store_byte ≥ 0.
 */
struct AdamWGroupArgs {
    float* p;
    const float* g;
    float* m;
    float* v;
    int64_t n;                   // floats in each flat buffer: every tensor lies within [0, n)
    const AdamWTensor* tensors;  // [count], backend memory, ascending non-overlapping offsets
    int count;
    void* store;                 // the copies' base (a model's 2-byte storage), or null when no tensor has one
    const AdamWFactors* f;
};

/** The factors of one step, computed on the host in f32 exactly as both backends always have. */
inline AdamWFactors adamwFactors(const AdamWArgs& a) {
    AdamWFactors f{};
    f.step = a.lr / a.bias_correction1;
    f.inv_sqrt_bc2 = 1.f / std::sqrt(a.bias_correction2);
    f.decay[0] = 1.f - a.lr * a.weight_decay;
    f.decay[1] = 1.f;
    f.beta1 = a.beta1;
    f.beta2 = a.beta2;
    f.c1 = 1.f - a.beta1;
    f.c2 = 1.f - a.beta2;
    f.eps = a.eps;
    f.grad_scale = a.grad_scale;
    f.skip = 0.f;
    return f;
}

/**
 * The optimizer's decision on the backend (so it can sit inside a captured step), with the host's double
 * arithmetic: norm = sqrt(Σ sums[i], in order) / loss_scale; skip when the norm is not finite, when loss_bad, or
 * when a checked loss (loss_sum / loss_count as a float) is not finite; else grad_scale = (clip > 0 and norm > clip ?
 * clip / (norm + 1e-6) : 1) / loss_scale.
 */
struct OptimizerControlArgs {
    const double* sums;     // backend memory: the sums of squares of the gradient buffers
    int nsums;
    const double* loss_sum; // backend memory: a loss to check, or null
    double loss_count;
    bool loss_bad;          // a non-finite loss already seen by the host
    float clip, loss_scale;
    AdamWFactors* factors;  // backend memory: grad_scale and skip written
    double* norm;           // backend memory: the unscaled gradient norm written
};

/** Softmax cross-entropy per row of logits against int32 targets; rows with target == ignore_index count nothing. */
struct CrossEntropyArgs {
    const float* logits;     // [rows, vocab]
    int64_t rows;
    int vocab;
    const int32_t* targets;  // [rows], backend memory; range-checked by the caller (or ignore_index)
    int ignore_index;
    float scale;             // dlogits = scale·(softmax − onehot)
    float* loss;             // [rows]: 0 when ignored
    float* correct;          // [rows]: 1 when the argmax is the target
    float* dlogits;          // [rows, vocab] or null; may alias logits
    // Or the gradient rounded to a 2-byte type (DTYPE_BF16/F16), [rows, ld16], for a linearBackward that takes it
    // as Gemm::a16. It may alias logits with ld16 = 2·vocab: each row's 2-byte values fill the first half of its own
    // f32 row, written only after that row is read. At most one of dlogits and dlogits16.
    void* dlogits16 = nullptr;
    int64_t ld16 = 0;
    int dtype16 = DTYPE_BF16;
};

/**
 * Backward of embed: dtable[ids[r], :] += dx[r, :] for r < rows. Deterministic without atomics: the rows of
 * one id are added into its table row one after the other in increasing r, so the result is bit-identical to
 * the plain loop over r on every backend and thread count (rows of different ids never interact).
 */
struct EmbedBackwardArgs {
    const float* dx;        // [rows, ldx]: the gradient of embed's output
    int64_t ldx;
    const int32_t* ids;     // [rows], backend memory; range-checked by the caller
    int64_t rows;
    int vocab, d;
    float* dtable;          // [vocab, d] f32 (+=)
};

/**
 * Samples one token per row from logits (core/sampling.h has the exact rule; every backend gives the same ids):
 * out[b] = the token of row b, or a negative sampling::kErr* code with the offending id in err_index[b]. The
 * row's random state advances by one draw (none when greedy or on an error) and the sampled id joins its seen
 * set (the repetition penalty's history). Nothing is synchronised: out stays in backend memory.
 */
struct SampleArgs {
    const float* logits;  // [batch, ld]; the first vocab of each row are sampled
    int64_t ld;
    int batch, vocab;
    const void* params;   // [batch] sampling::RowParams
    uint64_t* rng;        // [batch] SplitMix64 states
    uint32_t* seen;       // [batch, seen_words] bit sets of seen ids
    int64_t seen_words;
    int32_t* out;         // [batch]
    int32_t* err_index;   // [batch]
    void* scratch;        // sampling::ScratchLayout(vocab).bytes · batch bytes of backend memory (a host backend may ignore it)
    /** sampling::kNeeds* bits: which settings some row uses (a backend may skip the stages no row needs). */
    unsigned needs = ~0u;
};

class Ops {
public:
    virtual ~Ops() = default;
    virtual Capabilities capabilities() const = 0;

    // ---- memory (floats; 2-byte storage types use (n + 1) / 2 floats) ----
    /** Zero-filled buffer of n floats; throws OutOfMemoryError. */
    virtual float* alloc(int64_t n) = 0;
    virtual void release(float* p) noexcept = 0;
    virtual void upload(float* dst, const float* host, int64_t n) = 0;
    virtual void download(float* host, const float* src, int64_t n) = 0;
    virtual void copy(float* dst, const float* src, int64_t n) = 0;
    virtual void zero(float* p, int64_t n) = 0;
    /** Waits for all queued work (device backends run asynchronously). */
    virtual void synchronize() {}
    /** The CUDA stream (cudaStream_t) this context enqueues on, for interop; null where there is none (CPU). */
    virtual void* nativeStream() const { return nullptr; }

    // ---- products: the one dispatch point (gemm.h) ----
    virtual void gemm(const Gemm& g) = 0;
    /**
     * A Forward product whose x came rounded (Gemm::a16) run as the f32 product of the widened values — for a backend
     * or path that would not round x itself. Not virtual: a helper of gemm implementations.
     */
    void gemmWidened(const Gemm& g);
    /**
     * Named fusion: a weight's two backward products over the same dy — `dataGrad` (BackwardData) and `weightGrad`
     * (WeightGrad): the same rows, dy, weight shape, storage type and mode. dataGrad's output may overlap neither dy
     * nor weightGrad's x. A backend may round dy (and x) to the weight's storage type once for both products.
     * dy (Gemm::a16, the same in both) and x (Gemm::b16) may come rounded to the weight's 2-byte type instead of in f32.
     * Default: the two products in sequence, the weight gradient first (rounded operands widened to f32 first).
     */
    virtual void linearBackward(const Gemm& dataGrad, const Gemm& weightGrad);

    // ---- inference stages ----
    virtual void rmsnorm(const RmsNormArgs& a) = 0;
    /**
     * Named fusion: rmsnorm(norm), then the Forward product `linear`, whose input must be norm.y (the
     * normalised rows are also written there) — or, with norm.y16, its rounded x (Gemm::a16) must be norm.y16.
     * Default: the two ops in sequence.
     */
    virtual void normLinear(const RmsNormArgs& norm, const Gemm& linear) {
        rmsnorm(norm);
        gemm(linear);
    }
    /**
     * Named fusion: normLinear(norm, linear), then convSilu(conv), whose input must be the product's first conv.channels
     * outputs (conv.x == linear.c, conv.ldx == linear.ldc, one row per conv batch row). Decode's in_proj + conv: a
     * backend may run the conv step inside the product's epilogue. Default: the two ops in sequence.
     */
    virtual void normLinearConv(const RmsNormArgs& norm, const Gemm& linear, const ConvArgs& conv) {
        normLinear(norm, linear);
        convSilu(conv);
    }
    /**
     * out[r, :] = table[ids[r], :] (f32 out) for r < rows: table.out = vocabulary rows, table.in = width; ids are
     * backend int32, already range-checked; the table may be stored F32, BF16 or F16.
     */
    virtual void embed(const Matrix& table, const int32_t* ids, int64_t rows, float* out) = 0;
    /** a = -exp(a_log). */
    virtual void negExp(const float* a_log, float* a, int64_t n) = 0;
    /** n f32 values to dtype (DTYPE_BF16 or DTYPE_F16) at dst, round to nearest even. */
    virtual void toLowPrecision(const float* src, void* dst, int64_t n, int dtype) = 0;
    /** n dtype (DTYPE_BF16 or DTYPE_F16) values at src to f32 (exact). */
    virtual void fromLowPrecision(const void* src, int dtype, float* dst, int64_t n) = 0;
    virtual void convSilu(const ConvArgs& a) = 0;
    /**
     * The selective scan. Named fusion: with dtProj (a Forward product writing s.dt), the Δ projection is
     * computed first (a backend may compute it inside the scan; s.dt is written either way). With
     * checkpoints (training), the state before every chunk is recorded for selectiveScanBackward.
     */
    virtual void selectiveScan(const ScanArgs& s, const Gemm* dtProj, const ScanCheckpoints* checkpoints) = 0;
    /**
     * The Mamba-3 SISO recurrence with its pre- and post-processing (Mamba3ScanArgs). With checkpoints
     * (training), the whole row state before every chunk of steps is recorded for mamba3ScanBackward. A
     * backend picks its algorithm (step by step, or chunked for long sequences); the result is the recurrence's.
     */
    virtual void mamba3Scan(const Mamba3ScanArgs& s, const ScanCheckpoints* checkpoints) = 0;

    // ---- graphs: record a fixed sequence of launches once, replay it with one call (capabilities().graphs) ----
    /**
     * How many device buffers this backend has freed so far: a graph captured at count c may point into memory
     * freed since, so a caller keeping graphs across other work re-captures when the count moved.
     */
    virtual uint64_t freeCount() const { return 0; }
    /** Starts recording this backend's work (nothing may allocate until the capture ends). */
    virtual void beginCapture() {}
    /** Ends recording; returns an executable handle. */
    virtual void* endCapture() { return nullptr; }
    virtual void replay(void* graph) {}
    virtual void destroyGraph(void* graph) noexcept {}

    // ---- training (capabilities().training); gradients accumulate (+=) unless said otherwise ----
    virtual void rmsnormBackward(const RmsNormBackwardArgs& a) = 0;
    virtual void convSiluBackward(const ConvBackwardArgs& a) = 0;
    virtual void selectiveScanBackward(const ScanBackwardArgs& a) = 0;
    virtual void mamba3ScanBackward(const Mamba3ScanBackwardArgs& a) = 0;
    /** x[i] *= s. */
    virtual void scale(float* x, int64_t n, float s) = 0;
    /**
     * out[0] = Σ x[i]² (squares) or Σ x[i], accumulated in double over fixed-size chunks in a fixed order; out is
     * backend memory (read it back with download of 2 floats, or feed it to optimizerControl).
     */
    virtual void sumInto(const float* x, int64_t n, bool squares, double* out) = 0;
    /** See OptimizerControlArgs. */
    virtual void optimizerControl(const OptimizerControlArgs& a) = 0;
    /**
     * In-place AdamW on p with gradient g and moments m, v (all n floats), with the factors in backend memory f
     * (decay[0] when decayed, decay[1] otherwise); nothing when f->skip.
     */
    virtual void adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWFactors* f,
                       bool decayed) = 0;
    /**
     * See AdamWGroupArgs: the same bits as adamw per tensor followed by toLowPrecision / copy into the storage.
     * Default: exactly that (the table downloaded first); CUDA runs it as one kernel.
     */
    virtual void adamwGroup(const AdamWGroupArgs& a);
    /** dy = scale·2·(y − t); out[0] = Σ (y − t)² in double (backend memory, sumInto's order). */
    virtual void mse(const float* y, const float* target, int64_t n, float scale, float* dy, double* out) = 0;
    virtual void crossEntropy(const CrossEntropyArgs& a) = 0;
    virtual void embedBackward(const EmbedBackwardArgs& a) = 0;

    // ---- data-parallel training ----
    /**
     * The rank-order sum: out[i] = ((s[i] + s[n + i]) + s[2n + i]) + … over `ranks` slices of n floats (an
     * all-gather's output, rank after rank), exact f32 adds in that order — bitwise the host fold of
     * org.mamba4j.parallel. `out` must not overlap the slices. This default stages through the host; CUDA has a kernel.
     */
    virtual void sumRanks(const float* slices, int ranks, int64_t n, float* out) {
        std::vector<float> s(static_cast<size_t>(ranks) * static_cast<size_t>(n)), sum(static_cast<size_t>(n));
        download(s.data(), slices, ranks * n);
        for (int64_t i = 0; i < n; ++i) {
            float acc = s[static_cast<size_t>(i)];
            for (int r = 1; r < ranks; ++r) acc += s[static_cast<size_t>(r * n + i)];
            sum[static_cast<size_t>(i)] = acc;
        }
        upload(out, sum.data(), n);
    }

    // ---- sampling (every backend) ----
    virtual void sampleTokens(const SampleArgs& a) = 0;
};

/** Whether `ops` rounds the f32 operands of products over weights stored in `dtype` to that type (BF16/F16). */
inline bool roundsOperandsOf(const Ops& ops, int dtype) {
    return (dtype == DTYPE_BF16 || dtype == DTYPE_F16) && ops.capabilities().rounds_backward_operands;
}

/**
 * Checks the operands handed to linearBackward rounded: dy (Gemm::a16) the same in both products with no f32 dy
 * beside it, no bias gradient, lda16 ≥ out; x (Gemm::b16) on the weight gradient only, ldb16 ≥ in; BF16/F16 storage;
 * no keep16. Throws std::invalid_argument.
 */
void checkRoundedOperands(const Gemm& dataGrad, const Gemm& weightGrad);
/** Checks a cross-entropy's 2-byte gradient output (dlogits16): alone, BF16/F16, ld16 ≥ vocab. */
void checkCrossEntropyGrad(const CrossEntropyArgs& a);
/**
 * Checks an output that may come rounded: exactly one of f32 and r.data, r BF16/F16 with ld ≥ width (for more than
 * one row). `what` names the op and output in the message, e.g. "selectiveScanBackward: ddt".
 */
void checkRoundedOutput(const char* what, const float* f32, const Rounded16& r, int64_t rows, int width);
/** checkRoundedOutput for the scan backward's ddt and dz. */
void checkScanBackwardOutputs(const ScanBackwardArgs& s);
/** checkRoundedOutput for the conv backward's dx. */
void checkConvBackwardOutputs(const ConvBackwardArgs& c);
/** checkRoundedOutput for the scan's out, the rmsnorm's y and the optional u16 of a conv (BF16/F16, ld ≥ width). */
void checkScanOutputs(const ScanArgs& s);
void checkRmsNormOutputs(const RmsNormArgs& a);
void checkConvOutputs(const ConvArgs& c);
/** Checks a Forward product's rounded x (a16): BF16/F16 weight, no f32 x beside it, lda16 ≥ in, no keep16. */
void checkRoundedInput(const Gemm& g);

}  // namespace mamba
