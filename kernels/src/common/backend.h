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
};

/** The CPU backend singleton (OpenBLAS + our loops). */
Backend& cpuBackend();

}  // namespace mamba
