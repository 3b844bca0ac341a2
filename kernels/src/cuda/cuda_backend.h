// The CUDA backend: one CONTEXT per owner (a model with its states and trainer, or a Tensor), made by
// newCudaBackend(ordinal). A context owns a non-blocking stream and, created on first use, its cuBLAS
// handle (bound to the stream, with a fixed workspace), the bf16/f16 activation workspace of cuBLAS
// products, the chunked scan's and the training stages' workspaces and the pinned staging buffers of
// transfers. Nothing mutable is shared between contexts: two models on one device run on two streams
// with two handles and never see each other's scratch. A per-context lock serialises the calls made on
// one context; it is held by the capturing thread from beginCapture() to endCapture().
//
// Ops are launched as they are called; nothing is deferred or fused behind the caller's back. The two
// fusions of a decode step are the named ops normLinear (the rmsnorm prologue inside the gemv) and
// selectiveScan with dtProj (the Δ projection inside the sequential scan). Every product goes through
// gemm() (gemm/gemm.cu).
//
// Graphs: beginCapture() records this context's stream in cudaStreamCaptureModeThreadLocal, so other
// threads' CUDA calls (other contexts) neither break the capture nor enter it; everything a captured op
// might allocate (cuBLAS handle and workspaces) is created before the capture starts, and workspaces
// that grow while graphs are alive are retired, not freed, until the last graph is destroyed.
//
// Training: kernels in train_*.cu (train_kernels.h), cuBLAS in true f32 for the backward products,
// growable workspaces per stage, no atomics: results are bit-identical from run to run on the same GPU.
#pragma once

#include "cublas_loader.h"
#include "kernels.h"
#include "ops/ops.h"
#include "train_kernels.h"

#include <atomic>
#include <mutex>
#include <vector>

namespace mamba::cuda {

/**
 * The values a Forward product (or an embedding gather) reads from w: w.lowp for BF16/F16, w.f32 for
 * F32/TF32; the other pointer may be null. Throws std::invalid_argument, naming `op`, when the pointer
 * it needs is null (gemm/gemm.cu).
 */
const void* forwardStorage(const Matrix& w, const char* op);

// linearBackward's packed dy and x per chunk of rows: the 130m LM's in_proj (16,384 rows × (3,072 + 768) × 2 B) is
// one chunk, so its weight gradient is one product over every row, not a chain of beta = 1 products that re-read it.
constexpr size_t kPackWorkspaceMaxBytes = size_t{256} << 20;

/** Floats from the first to one past the last element of a row-major [rows, cols] block with row stride ld. */
inline int64_t span(int64_t rows, int64_t ld, int64_t cols) { return rows > 0 ? (rows - 1) * ld + cols : 0; }

/** [a, a + n) and [b, b + m) (floats) do not overlap. */
inline bool disjoint(const float* a, int64_t n, const float* b, int64_t m) { return a + n <= b || b + m <= a; }

class CudaBackend final : public Ops {
public:
    /** A context on device `ordinal` (which must exist): its stream only; everything else on first use. */
    explicit CudaBackend(int ordinal);
    ~CudaBackend() override;
    CudaBackend(const CudaBackend&) = delete;
    CudaBackend& operator=(const CudaBackend&) = delete;

    Capabilities capabilities() const override;

    float* alloc(int64_t n) override;
    void release(float* p) noexcept override;
    void upload(float* dst, const float* host, int64_t n) override;
    void download(float* host, const float* src, int64_t n) override;
    void copy(float* dst, const float* src, int64_t n) override;
    void zero(float* p, int64_t n) override;
    void synchronize() override;
    void* nativeStream() const override { return stream_; }

    void gemm(const Gemm& g) override;  // gemm/gemm.cu
    void linearBackward(const Gemm& dataGrad, const Gemm& weightGrad) override;  // gemm/gemm.cu

    void rmsnorm(const RmsNormArgs& a) override;
    void normLinear(const RmsNormArgs& norm, const Gemm& linear) override;
    void normLinearConv(const RmsNormArgs& norm, const Gemm& linear, const ConvArgs& conv) override;
    void embed(const Matrix& table, const int32_t* ids, int64_t rows, float* out) override;
    void negExp(const float* a_log, float* a, int64_t n) override;
    void toLowPrecision(const float* src, void* dst, int64_t n, int dtype) override;
    void fromLowPrecision(const void* src, int dtype, float* dst, int64_t n) override;
    void convSilu(const ConvArgs& a) override;
    void selectiveScan(const ScanArgs& s, const Gemm* dtProj, const ScanCheckpoints* checkpoints) override;
    void mamba3Scan(const Mamba3ScanArgs& s, const ScanCheckpoints* checkpoints) override;

    void beginCapture() override;
    void* endCapture() override;
    void replay(void* graph) override;
    void destroyGraph(void* graph) noexcept override;

    void rmsnormBackward(const RmsNormBackwardArgs& a) override;
    void convSiluBackward(const ConvBackwardArgs& a) override;
    void selectiveScanBackward(const ScanBackwardArgs& a) override;
    void mamba3ScanBackward(const Mamba3ScanBackwardArgs& a) override;
    void scale(float* x, int64_t n, float s) override;
    uint64_t freeCount() const override { return frees_.load(); }
    void sumInto(const float* x, int64_t n, bool squares, double* out) override;
    void optimizerControl(const OptimizerControlArgs& a) override;
    void sumRanks(const float* slices, int ranks, int64_t n, float* out) override;  // rank_sum.cu
    void adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWFactors* f, bool decayed) override;
    void adamwGroup(const AdamWGroupArgs& a) override;
    void mse(const float* y, const float* target, int64_t n, float scale, float* dy, double* out) override;
    void crossEntropy(const CrossEntropyArgs& a) override;
    void embedBackward(const EmbedBackwardArgs& a) override;
    void sampleTokens(const SampleArgs& a) override;  // sample_tokens.cu

    // ---- for the kernel tests and benchmarks (each acts on this context only) ----
    int ordinal() const { return ordinal_; }
    cudaStream_t stream() const { return stream_; }
    int multiprocessors() const { return exec_.sms; }
    /** Forces the scan algorithm (Auto by default) and, for the chunked one, the chunk length (0: planned). */
    void setScanAlgo(ScanAlgo algo, int chunk = 0);
    /** Turns programmatic dependent launch on or off (on by default on Hopper; env MAMBA_CUDA_PDL=0 disables). */
    void setPdl(bool on);
    bool pdl() const { return pdl_; }
    /**
     * Turns the fused kernels of the named fusions (normLinear, selectiveScan with dtProj) on or off (on by
     * default; env MAMBA_CUDA_FUSE=0 disables): off runs them as their two ops.
     */
    void setFusion(bool on);
    /** Forces the group size of vectorised gemvs (8 … 256; 0 restores the automatic choice). */
    void setGemvGroup(int G);
    /** Whether normLinear(norm, linear) would run as one kernel (for tests of the decision). */
    bool normLinearFuses(const RmsNormArgs& norm, const Gemm& linear);
    /** Whether selectiveScan(s, dtProj, checkpoints) would compute the Δ projection inside the scan. */
    bool scanFusesDtProjection(const ScanArgs& s, const Gemm* dtProj, const ScanCheckpoints* checkpoints);

private:
    using Lock = std::lock_guard<std::recursive_mutex>;

    void enter();      // makes our device current for this thread
    Exec nextExec();   // the launch settings for the next stage
    void setMath(int mode);
    /** The handle, created (with its fixed workspace, bound to our stream) on first use; never in a capture. */
    cublasHandle blas();
    /** The fixed bf16/f16 activation workspace of cuBLAS products, created on first use; never in a capture. */
    void* lowpWorkspace();
    /**
     * linearBackward's workspace of packed operands, at least `bytes` (≤ kPackWorkspaceMaxBytes) large: grown outside
     * captures (OutOfMemoryError when the device has no room; inside a capture a logic_error, which turns the graph
     * off). Its size never decides a chunk: linearBackward chunks by shape alone.
     */
    void* packWorkspace(size_t bytes);
    /** cudaMalloc that reports failures as OutOfMemoryError (naming the device and its free memory). */
    void* deviceMalloc(size_t bytes, const char* what);
    void* pinned(void*& buf, size_t& cap, size_t bytes);  // grows a pinned staging buffer (null: use pageable)
    void freeNow(void* p) noexcept;
    void releaseRetired() noexcept;
    void requireNotCapturing(const char* what) const;

    // gemm/gemm.cu (the lock is held)
    void runGemm(const Gemm& g);
    void gemmForward(const Exec& e, const Gemm& g);
    /** A Forward product whose x came rounded (Gemm::a16). */
    void gemmForwardRounded(const Exec& e, const Gemm& g);
    void gemmBackwardData(const Exec& e, const Gemm& g);
    void gemmWeightGrad(const Exec& e, const Gemm& g);
    /**
     * y[r] = W'·x[r] + beta·y[r] for 2-byte W (opW: kCublasOpT forward, kCublasOpN input gradient; m outputs,
     * k inputs per row): x's rows packed to W's type in the workspace a chunk at a time, cublasGemmEx with f32
     * accumulation. The chunk size depends on k and the workspace alone. With `keep` the packed rows are also left
     * there ([rows, k] dense: Gemm::keep16).
     */
    void packedRowsGemm(const Exec& e, int opW, int m, int k, const void* w, int ldw, int dtype, const float* x,
                        int64_t ldx, int64_t rows, float beta, float* y, int64_t ldy, void* packed, const char* what,
                        void* keep = nullptr);
    /**
     * An operand of a 2-byte product, handed over chunk by chunk of rows: f32 rows (`f32`, ld) rounded into `pack`
     * (dense); or rows already rounded (`rounded`, ld in 2-byte values) read in place (no pack) or copied into `pack`.
     */
    struct LowpOperand {
        const float* f32;
        int64_t ld;
        const void* rounded;
        void* pack;
        /** Rows [r0, r0 + n) of `width` values in W's type; *ld_out gets their ld. */
        const void* chunk(const Exec& e, int64_t r0, int64_t n, int width, int dtype, int* ld_out) const;
    };
    /**
     * The 2-byte backward of `weight` (WeightGrad) and, when `data` is given, of its input gradient over the same dy,
     * `chunk` rows at a time: dxᶜ(in×n) = Wᶜ(in×out) · dyᶜ(out×n) and dwᶜ(in×out) += xᶜ(in×n) · dyᶜ(out×n)ᵀ.
     * dbias is the caller's.
     */
    void packedBackward(const Exec& e, const Gemm& weight, const Gemm* data, const LowpOperand& x,
                        const LowpOperand& dy, int64_t chunk);
    // the fusion decisions (the lock is held)
    /** Which kernel runs normLinear's two ops (and, with `conv`, decode's conv step) as one; kNone: apart. */
    enum class NormFusion { kNone, kGemv, kTensorChain };
    NormFusion normFusion(const RmsNormArgs& norm, const Gemm& linear, const ConvEpilogue* conv) const;
    bool fuseDtProjection(const ScanArgs& s, const Gemm* dtProj, const ScanCheckpoints* ck, const ScanPlan& plan) const;
    ScanPlan planFor(const ScanArgs& s, const ScanCheckpoints* ck) const;
    /** The fused rmsnorm + product that normFusion chose, with decode's conv step behind it when `conv`. */
    void fusedNormLinear(NormFusion kind, const RmsNormArgs& norm, const Gemm& linear, const ConvEpilogue* conv);

    /** A training stage's workspace (see train::Scratch); grows outside captures only. */
    train::Scratch trainScratch();
    static float* growTrainWorkspace(void* self, int slot, int64_t floats);

    std::recursive_mutex mu_;
    const int ordinal_;
    cudaStream_t stream_ = nullptr;
    Exec exec_;
    bool pdl_ = false;
    bool serialize_next_ = true;  // the next stage must not overlap its predecessor (weights just changed)
    bool fuse_ = true;
    ScanAlgo scan_algo_ = ScanAlgo::Auto;
    int scan_chunk_ = 0;
    // created on first use
    cublasHandle blas_ = nullptr;
    void* blas_ws_ = nullptr;
    int math_mode_ = -1;
    void* lowp_ws_ = nullptr;   // activations packed to bf16/f16 for cublasGemmEx
    size_t lowp_ws_bytes_ = 0;
    void* pack_ws_ = nullptr;   // linearBackward's dy and x in bf16/f16 (packWorkspace)
    size_t pack_ws_bytes_ = 0;
    float* scan_ws_ = nullptr;  // chunk states of the chunked scan, grown outside captures
    int64_t scan_ws_floats_ = 0;
    static constexpr int kTrainSlots = 8;
    float* train_ws_[kTrainSlots] = {};   // training workspaces by slot (train_kernels.h says who uses which)
    int64_t train_ws_floats_[kTrainSlots] = {};
    // graphs
    bool capturing_ = false;
    std::vector<void*> deferred_;  // frees asked for during a capture
    std::vector<void*> deferred_graphs_;  // graphs destroyed during a capture
    std::vector<void*> retired_;   // old workspaces that a live graph may still point at
    int live_graphs_ = 0;
    std::atomic<uint64_t> frees_{0};
    // pinned staging of small transfers: no driver-side bounce, no extra synchronisation for uploads
    void* pin_up_ = nullptr;
    size_t pin_up_cap_ = 0;
    cudaEvent_t up_done_ = nullptr;  // the last upload's copy out of pin_up_ has finished
    void* pin_down_ = nullptr;
    size_t pin_down_cap_ = 0;
};

}  // namespace mamba::cuda
