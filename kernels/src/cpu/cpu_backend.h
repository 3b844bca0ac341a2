// The CPU backend: OpenBLAS for the products (one dispatch point, cpu_gemm.cpp), our vectorised loops for
// the fused stages. Work is split into (batch row, channel block) tasks, and every reduction runs over
// tasks, rows or steps in a fixed order, so results are bit-identical for any thread count and for any
// number of concurrent callers (locking: blas_threads.h).
//
// One class, its members defined by concept:
//   cpu_backend.cpp  memory, capabilities, rmsnorm, embed, negExp, low-precision conversion, convSilu
//   cpu_gemm.cpp     gemm (every product, forward and backward)
//   cpu_scan.cpp     selectiveScan (inference and training) and selectiveScanBackward
//   cpu_mamba3.cpp   mamba3Scan and mamba3ScanBackward (Mamba-3 SISO; (batch row, head) tasks)
//   cpu_train.cpp    rmsnorm/conv backward, scale, sumOfSquares, AdamW, losses
#pragma once

#include "ops/ops.h"

namespace mamba::cpu {

class CpuBackend final : public Ops {
public:
    Capabilities capabilities() const override;

    float* alloc(int64_t n) override;
    void release(float* p) noexcept override;
    void upload(float* dst, const float* host, int64_t n) override;
    void download(float* host, const float* src, int64_t n) override;
    void copy(float* dst, const float* src, int64_t n) override;
    void zero(float* p, int64_t n) override;

    void gemm(const Gemm& g) override;

    void rmsnorm(const RmsNormArgs& a) override;
    void embed(const Matrix& table, const int32_t* ids, int64_t rows, float* out) override;
    void negExp(const float* a_log, float* a, int64_t n) override;
    void toLowPrecision(const float* src, void* dst, int64_t n, int dtype) override;
    void fromLowPrecision(const void* src, int dtype, float* dst, int64_t n) override;
    void convSilu(const ConvArgs& a) override;
    void selectiveScan(const ScanArgs& s, const Gemm* dtProj, const ScanCheckpoints* checkpoints) override;
    void mamba3Scan(const Mamba3ScanArgs& s, const ScanCheckpoints* checkpoints) override;

    void rmsnormBackward(const RmsNormBackwardArgs& a) override;
    void convSiluBackward(const ConvBackwardArgs& a) override;
    void selectiveScanBackward(const ScanBackwardArgs& a) override;
    void mamba3ScanBackward(const Mamba3ScanBackwardArgs& a) override;
    void scale(float* x, int64_t n, float s) override;
    void sumInto(const float* x, int64_t n, bool squares, double* out) override;
    void optimizerControl(const OptimizerControlArgs& a) override;
    void adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWFactors* f, bool decayed) override;
    void mse(const float* y, const float* target, int64_t n, float scale, float* dy, double* out) override;
    void crossEntropy(const CrossEntropyArgs& a) override;
    void embedBackward(const EmbedBackwardArgs& a) override;

    void sampleTokens(const SampleArgs& a) override;  // cpu_sampler.cpp
};

// Shared by the stage files.
/** Channels per task in conv/scan (and columns per block in column reductions): a multiple of the SIMD width. */
constexpr int kChannelBlock = 64;
/** Below this many elementary updates a stage runs on the calling thread. */
constexpr int64_t kMinParallelWork = 1 << 14;

/**
 * Reusable workspaces: growing buffers kept between calls, so steady-state training allocates nothing.
 * scratch() belongs to the calling thread (an op's partial sums, read after its parallelFor returns),
 * workerScratch() to whichever thread runs a task. Per thread, so concurrent callers never share one.
 * Contents are never assumed zero.
 */
float* scratch(int slot, int64_t n);        // slots 0..3
float* workerScratch(int slot, int64_t n);  // slots 0..7

}  // namespace mamba::cpu
