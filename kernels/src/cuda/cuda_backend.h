// The CUDA backend: one instance per device (cudaBackend(ordinal)), owning a stream, a cuBLAS handle bound
// to it with a fixed workspace, pinned staging buffers and the scratch buffers of the stages. Every call is
// serialised by a per-device lock, held by the capturing thread from beginCapture() to endCapture() so
// that no other thread's work can slip into a graph.
//
// Stage fusion: a decode-sized rmsnorm (≤ kGemvMaxRows rows) is not launched at once but kept pending;
// if the next call is a linear reading its output, one gemv kernel does both. Likewise a small linear is
// kept pending and, if the next call is the scan consuming it as dt, the scan computes it. Every other
// call launches what is pending first, so callers see the same results in the same order — any new
// method that touches device memory must call flush() first.
//
// Training (the stages at the end of Backend): kernels in train_*.cu (train_kernels.h), cuBLAS in true
// f32 for the backward products, growable workspaces per stage (train_ws_), no atomics: results are
// bit-identical from run to run on the same GPU model.
#pragma once

#include "../common/backend.h"
#include "cublas_loader.h"
#include "kernels.h"
#include "train_kernels.h"

#include <mutex>
#include <string>
#include <vector>

namespace mamba::cuda {

class CudaBackend final : public Backend {
public:
    explicit CudaBackend(int ordinal);
    ~CudaBackend() override;
    CudaBackend(const CudaBackend&) = delete;
    CudaBackend& operator=(const CudaBackend&) = delete;

    bool isHost() const override { return false; }
    float* alloc(int64_t n) override;
    void release(float* p) noexcept override;
    void upload(float* dst, const float* host, int64_t n) override;
    void download(float* host, const float* src, int64_t n) override;
    void copy(float* dst, const float* src, int64_t n) override;
    void zero(float* p, int64_t n) override;

    void linear(const float* x, int64_t ldx, int64_t rows, const Matrix& w, const float* bias, float* y, int64_t ldy,
                float beta) override;
    void rmsnorm(const float* x, int64_t ldx, const float* w, int64_t rows, int d, float eps, float* y,
                 int64_t ldy) override;
    void embed(const float* table, const int32_t* ids, int64_t rows, int d, float* out) override;
    void negExp(const float* a_log, float* a, int64_t n) override;
    void convSilu(const ConvArgs& args) override;
    void selectiveScan(const ScanArgs& args) override;
    void toLowPrecision(const float* src, void* dst, int64_t n, int dtype) override;

    bool supportsGraphs() const override { return true; }
    void beginCapture() override;
    void* endCapture() override;
    void replay(void* graph) override;
    void destroyGraph(void* graph) noexcept override;
    void synchronize() override;

    // ---- training (train_*.cu) ----
    void linearBackward(const float* dy, int64_t lddy, int64_t rows, const Matrix& w, float* dx, int64_t lddx,
                        float beta) override;
    void linearWeightGrad(const float* dy, int64_t lddy, const float* x, int64_t ldx, int64_t rows, int out, int in,
                          float* dw, float* dbias) override;
    void rmsnormBackward(const float* x, int64_t ldx, const float* w, const float* dy, int64_t lddy, int64_t rows,
                         int d, float eps, float* dx, int64_t lddx, float beta, float* dw) override;
    void convSiluBackward(const ConvBackwardArgs& args) override;
    void selectiveScanTrain(const ScanArgs& args, float* checkpoints, int chunk) override;
    void selectiveScanBackward(const ScanBackwardArgs& args) override;
    void scale(float* x, int64_t n, float s) override;
    double sumOfSquares(const float* x, int64_t n) override;
    void adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWArgs& args) override;
    double mse(const float* y, const float* target, int64_t n, float scale, float* dy) override;
    void crossEntropy(const float* logits, int64_t rows, int vocab, const int32_t* targets, int ignore_index,
                      float scale, float* loss, float* correct, float* dlogits) override;

    // ---- for the kernel tests and benchmarks ----
    int ordinal() const { return ordinal_; }
    cudaStream_t stream() const { return stream_; }
    int multiprocessors() const { return exec_.sms; }
    /** Forces the scan algorithm (Auto by default) and, for the chunked one, the chunk length (0: planned). */
    void setScanAlgo(ScanAlgo algo, int chunk = 0);
    /** Turns programmatic dependent launch on or off (on by default on Hopper; env MAMBA_CUDA_PDL=0 disables). */
    void setPdl(bool on);
    bool pdl() const { return pdl_; }
    /** Turns stage fusion on or off (on by default; env MAMBA_CUDA_FUSE=0 disables). */
    void setFusion(bool on);
    /** Launches a deferred stage now (timing code records its end event after this). */
    void flushPending();

private:
    void enter();      // makes our device current for this thread
    Exec nextExec();   // the launch settings for the next stage
    void setMath(int mode);
    void flush();      // launches the pending (deferred) stage, if any
    void runLinear(const float* x, int64_t ldx, int64_t rows, const Matrix& w, const float* bias, float* y,
                   int64_t ldy, float beta);
    void* pinned(void*& buf, size_t& cap, size_t bytes);  // grows a pinned staging buffer (null: use pageable)
    void freeNow(void* p) noexcept;
    void releaseRetired() noexcept;
    /** The lock is held: starts a training stage (device current, pending stage launched, its Exec). */
    Exec trainEnter();
    /** A training stage's workspace (see train::Scratch); grows outside captures only. */
    train::Scratch trainScratch();
    static float* growTrainWorkspace(void* self, int slot, int64_t floats);

    std::recursive_mutex mu_;
    const int ordinal_;
    cudaStream_t stream_ = nullptr;
    cublasHandle blas_ = nullptr;
    void* blas_ws_ = nullptr;
    void* lowp_ws_ = nullptr;   // activations packed to bf16/f16 for cublasGemmEx
    size_t lowp_ws_bytes_ = 0;
    float* scan_ws_ = nullptr;  // chunk states of the chunked scan, grown outside captures
    int64_t scan_ws_floats_ = 0;
    static constexpr int kTrainSlots = 8;
    float* train_ws_[kTrainSlots] = {};   // training workspaces by slot (train_kernels.h says who uses which)
    int64_t train_ws_floats_[kTrainSlots] = {};
    Exec exec_;
    bool pdl_ = false;
    bool serialize_next_ = true;  // the next stage must not overlap its predecessor (weights just changed)
    int math_mode_ = -1;
    ScanAlgo scan_algo_ = ScanAlgo::Auto;
    int scan_chunk_ = 0;
    bool capturing_ = false;
    std::vector<void*> deferred_;  // frees asked for during a capture
    std::vector<void*> retired_;   // old scratch that a live graph may still point at
    int live_graphs_ = 0;
    // pinned staging of small transfers: no driver-side bounce, no extra synchronisation for uploads
    void* pin_up_ = nullptr;
    size_t pin_up_cap_ = 0;
    cudaEvent_t up_done_ = nullptr;  // the last upload's copy out of pin_up_ has finished
    void* pin_down_ = nullptr;
    size_t pin_down_cap_ = 0;
    // deferred stages (see the header comment)
    bool fuse_ = true;
    struct PendingNorm {
        bool on = false;
        const float* x;
        int64_t ldx;
        const float* w;
        int64_t rows;
        int d;
        float eps;
        float* y;
        int64_t ldy;
    } pn_;
    struct PendingLinear {
        bool on = false;
        const float* x;
        int64_t ldx;
        int64_t rows;
        Matrix w;
        const float* bias;
        float* y;
        int64_t ldy;
        float beta;
    } pl_;
};

}  // namespace mamba::cuda
