// The backend interface: what a device must provide for the model code (mamba1_model.cpp) to run.
// Operations are fused stages, not BLAS-sized primitives, so each backend can keep data in
// registers/cache between the steps of a stage. Pointers are backend memory (host for CPU,
// device for CUDA). All buffers are row-major f32 unless the Matrix says otherwise.
#pragma once

#include <cstdint>
#include <stdexcept>

namespace mamba {

/** A linear weight [out, in] (PyTorch layout), y = x · Wᵀ. lowp is an optional bf16/f16 copy. */
struct Matrix {
    const float* f32;
    const void* lowp;
    int lowp_dtype;
    int out, in;
};

/** Causal depthwise conv over T steps with carried history, then SiLU. */
struct ConvArgs {
    const float* x;      // [B*T rows, ldx]: the conv branch of in_proj's output
    int64_t ldx;
    const float* w;      // [channels, width]
    const float* bias;   // [channels]
    float* history;      // per row b: [channels, width-1], oldest first; read and rewritten
    int64_t history_stride;  // floats between rows of history
    float* u;            // out: [B*T, ldu] = SiLU(conv)
    int64_t ldu;
    int batch, steps, channels, width;
};

/** softplus(Δ) → discretise → selective scan with carried h → + D·u → gate with SiLU(z). */
struct ScanArgs {
    const float* dt;     // [B*T, channels]: dt_proj output incl. bias, before softplus
    const float* a;      // [channels, d_state] = -exp(A_log)
    const float* bc;     // [B*T, ldbc]: B_t at bc[0..d_state), C_t at bc[d_state..2*d_state)
    int64_t ldbc;
    const float* u;      // [B*T, channels]
    const float* z;      // [B*T, ldz]: the gate branch
    int64_t ldz;
    const float* d_skip; // [channels]
    float* h;            // per row b: [channels, d_state]; read and rewritten
    int64_t h_stride;
    float* out;          // [B*T, channels]: y · SiLU(z)
    int batch, steps, channels, d_state;
};

/** Backward of convSilu (training). Recomputes the conv output from x and the starting history. */
struct ConvBackwardArgs {
    const float* x;            // [B*T, ldx]: the forward's conv input (in_proj's x half)
    int64_t ldx;
    const float* history;      // per row b: [channels, width-1] as it was BEFORE the forward (oldest first)
    int64_t history_stride;
    const float* w;            // [channels, width]
    const float* bias;         // [channels]
    const float* du;           // [B*T, ldu]: gradient of SiLU's output u
    int64_t ldu;
    float* dx;                 // out: [B*T, lddx] gradient of x (overwritten); the history's gradient is dropped
    int64_t lddx;
    float* dw;                 // [channels, width] += (summed over rows in row order)
    float* dbias;              // [channels] +=
    int batch, steps, channels, width;
};

/** Backward of selectiveScan (training): softplus, scan from the starting h, D skip and the SiLU(z) gate. */
struct ScanBackwardArgs {
    const float* dt;           // [B*T, channels]: forward's dt_proj output incl. bias (before softplus)
    const float* a;            // [channels, d_state] = -exp(A_log)
    const float* bc;           // [B*T, ldbc]: B_t then C_t
    int64_t ldbc;
    const float* u;            // [B*T, channels]
    const float* z;            // [B*T, ldz]
    int64_t ldz;
    const float* d_skip;       // [channels]
    const float* checkpoints;  // per row b: [chunks][channels, d_state], h before steps 0, chunk, 2·chunk, …
    int chunk;                 // steps between checkpoints (as given to selectiveScanTrain)
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
};

/** One AdamW update (PyTorch semantics) of n parameters: decoupled decay, bias-corrected moments. */
struct AdamWArgs {
    float lr, beta1, beta2, eps, weight_decay;
    float bias_correction1, bias_correction2;  // 1 - beta^step
    float grad_scale;                          // gradient multiplier (global-norm clipping), applied first
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual bool isHost() const = 0;

    /** Zero-filled buffer of n floats; throws OutOfMemoryError. */
    virtual float* alloc(int64_t n) = 0;
    virtual void release(float* p) noexcept = 0;
    virtual void upload(float* dst, const float* host, int64_t n) = 0;
    virtual void download(float* host, const float* src, int64_t n) = 0;
    virtual void copy(float* dst, const float* src, int64_t n) = 0;
    virtual void zero(float* p, int64_t n) = 0;

    /** y[r, 0:out] = beta·y[r, 0:out] + x[r, 0:in]·Wᵀ (+ bias), for r < rows. */
    virtual void linear(const float* x, int64_t ldx, int64_t rows, const Matrix& w, const float* bias,
                        float* y, int64_t ldy, float beta) = 0;
    /** y[r] = w ⊙ x[r] / sqrt(mean(x[r]²) + eps). */
    virtual void rmsnorm(const float* x, int64_t ldx, const float* w, int64_t rows, int d, float eps,
                         float* y, int64_t ldy) = 0;
    /** out[r, :] = table[ids[r], :] for r < rows (ids are device ints, already range-checked). */
    virtual void embed(const float* table, const int32_t* ids, int64_t rows, int d, float* out) = 0;
    /** a = -exp(a_log). */
    virtual void negExp(const float* a_log, float* a, int64_t n) = 0;
    virtual void convSilu(const ConvArgs& args) = 0;
    virtual void selectiveScan(const ScanArgs& args) = 0;

    // ---- low-precision weights (devices that store BF16/F16 matrices) ----
    /** Converts n f32 values to dtype (DTYPE_BF16 or DTYPE_F16) at dst (2 bytes each, round to nearest even). */
    virtual void toLowPrecision(const float* src, void* dst, int64_t n, int dtype) {
        throw std::invalid_argument("this backend stores F32 weights only");
    }

    // ---- graphs: record a fixed sequence of launches once, replay it with one call ----
    virtual bool supportsGraphs() const { return false; }
    /** Starts recording the work this backend is asked to do (nothing may allocate until capture ends). */
    virtual void beginCapture() {}
    /** Ends recording; returns an executable handle. */
    virtual void* endCapture() { return nullptr; }
    virtual void replay(void* graph) {}
    virtual void destroyGraph(void* graph) noexcept {}
    /** Waits for all queued work (device backends run asynchronously). */
    virtual void synchronize() {}

    // ---- training (mamba1_train.cpp, trainer_api.cpp). Gradients accumulate (+=) unless said otherwise;
    // every reduction over rows must run in a fixed order so results do not depend on thread counts. ----
    /**
     * linear() whose results do not depend on the thread count (the training forward uses it, so training is
     * reproducible for any thread count). Default: linear(), for backends without a thread count.
     */
    virtual void linearDeterministic(const float* x, int64_t ldx, int64_t rows, const Matrix& w, const float* bias,
                                     float* y, int64_t ldy, float beta) {
        linear(x, ldx, rows, w, bias, y, ldy, beta);
    }
    /** dx[r, 0:in] = beta·dx[r, 0:in] + dy[r, 0:out]·W (the f32 weights). */
    virtual void linearBackward(const float* dy, int64_t lddy, int64_t rows, const Matrix& w, float* dx, int64_t lddx,
                                float beta) {
        throw std::runtime_error("training is not supported on this backend yet");
    }
    /** dw[out, in] += Σ_r dy[r]ᵀ·x[r]; dbias[out] += Σ_r dy[r] when dbias is not null. */
    virtual void linearWeightGrad(const float* dy, int64_t lddy, const float* x, int64_t ldx, int64_t rows, int out,
                                  int in, float* dw, float* dbias) {
        throw std::runtime_error("training is not supported on this backend yet");
    }
    /** Backward of rmsnorm: dx = beta·dx + ∂/∂x; dw += Σ_r dy ⊙ x̂ (x̂ = x / rms). */
    virtual void rmsnormBackward(const float* x, int64_t ldx, const float* w, const float* dy, int64_t lddy,
                                 int64_t rows, int d, float eps, float* dx, int64_t lddx, float beta, float* dw) {
        throw std::runtime_error("training is not supported on this backend yet");
    }
    virtual void convSiluBackward(const ConvBackwardArgs& args) {
        throw std::runtime_error("training is not supported on this backend yet");
    }
    /**
     * selectiveScan for the training forward: the same outputs and state update, and also the SSM state of
     * every row before steps 0, chunk, 2·chunk, … into checkpoints ([batch][ceil(steps/chunk)][channels,
     * d_state]), which selectiveScanBackward recomputes the states from, one chunk at a time.
     */
    virtual void selectiveScanTrain(const ScanArgs& args, float* checkpoints, int chunk) {
        throw std::runtime_error("training is not supported on this backend yet");
    }
    virtual void selectiveScanBackward(const ScanBackwardArgs& args) {
        throw std::runtime_error("training is not supported on this backend yet");
    }
    /** x[i] *= s. */
    virtual void scale(float* x, int64_t n, float s) {
        throw std::runtime_error("training is not supported on this backend yet");
    }
    /** Σ x[i]², accumulated in double over fixed-size chunks in a fixed order (deterministic). */
    virtual double sumOfSquares(const float* x, int64_t n) {
        throw std::runtime_error("training is not supported on this backend yet");
    }
    /** In-place AdamW on p with gradient g and moments m, v (all n floats). */
    virtual void adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWArgs& args) {
        throw std::runtime_error("training is not supported on this backend yet");
    }
    /** dy = scale·2·(y − t); returns Σ (y − t)² in double (deterministic). */
    virtual double mse(const float* y, const float* target, int64_t n, float scale, float* dy) {
        throw std::runtime_error("training is not supported on this backend yet");
    }
    /**
     * Softmax cross-entropy per row of logits [rows, vocab] against int32 targets (backend memory);
     * rows whose target equals ignore_index count nothing. Writes loss[r] (0 when ignored), correct[r]
     * (1 when the argmax is the target) and, when dlogits is not null, dlogits = scale·(softmax − onehot)
     * (zeros for ignored rows). dlogits may alias logits.
     */
    virtual void crossEntropy(const float* logits, int64_t rows, int vocab, const int32_t* targets, int ignore_index,
                              float scale, float* loss, float* correct, float* dlogits) {
        throw std::runtime_error("training is not supported on this backend yet");
    }
};

/** The CPU backend singleton (OpenBLAS + our loops). */
Backend& cpuBackend();

}  // namespace mamba
