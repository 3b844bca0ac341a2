// The CUDA backend: device memory, transfers, dispatch of each stage to its kernels or to cuBLAS, stage
// fusion for decode, and CUDA graphs. Kernels live in one file per stage (kernels.h lists them).
#include "cuda_backend.h"

#include "../common/devices.h"
#include "mamba/mamba.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

namespace mamba {
namespace cuda {

namespace {
constexpr size_t kCublasWorkspaceBytes = 32u << 20;  // cuBLAS' recommendation for Hopper
constexpr size_t kLowpWorkspaceBytes = 32u << 20;    // bf16/f16 activations of one cuBLAS chunk
constexpr size_t kPinnedMaxBytes = 64u << 20;        // larger transfers go straight from pageable memory
constexpr int kDtFuseMaxRank = 1024;                 // linears this narrow may be fused into the scan

int toInt(int64_t v, const char* what) {
    if (v > std::numeric_limits<int>::max())
        throw std::invalid_argument(std::string("linear: ") + what + " = " + std::to_string(v) +
                                    " exceeds the 32-bit range of cuBLAS");
    return static_cast<int>(v);
}

std::string mib(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

bool envOff(const char* name) {
    const char* v = std::getenv(name);
    return v && std::strcmp(v, "0") == 0;
}

/** [a, a + n) and [b, b + m) (floats) do not overlap. */
bool disjoint(const float* a, int64_t n, const float* b, int64_t m) { return a + n <= b || b + m <= a; }
}  // namespace

CudaBackend::CudaBackend(int ordinal) : ordinal_(ordinal) {
    check(cudaSetDevice(ordinal), "cudaSetDevice");
    int major = 0;
    check(cudaDeviceGetAttribute(&exec_.sms, cudaDevAttrMultiProcessorCount, ordinal), "cudaDeviceGetAttribute");
    check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal), "cudaDeviceGetAttribute");
    pdl_ = major >= 9 && !envOff("MAMBA_CUDA_PDL");
    fuse_ = !envOff("MAMBA_CUDA_FUSE");
    try {
        check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
        exec_.stream = stream_;
        exec_.pdl = pdl_;
        check(cudaEventCreateWithFlags(&up_done_, cudaEventDisableTiming), "cudaEventCreate");
        const CublasApi& api = cublas();
        checkCublas(api.create(&blas_), "cublasCreate_v2");
        checkCublas(api.setStream(blas_, stream_), "cublasSetStream_v2");
        check(cudaMalloc(&blas_ws_, kCublasWorkspaceBytes), "cudaMalloc (cuBLAS workspace)");
        // A fixed workspace, set before any capture: captured GEMMs then allocate nothing.
        checkCublas(api.setWorkspace(blas_, blas_ws_, kCublasWorkspaceBytes), "cublasSetWorkspace_v2");
        check(cudaMalloc(&lowp_ws_, kLowpWorkspaceBytes), "cudaMalloc (activation workspace)");
        lowp_ws_bytes_ = kLowpWorkspaceBytes;
        setMath(kCublasDefaultMath);
    } catch (...) {
        if (blas_) cublas().destroy(blas_);
        if (blas_ws_) cudaFree(blas_ws_);
        if (lowp_ws_) cudaFree(lowp_ws_);
        if (up_done_) cudaEventDestroy(up_done_);
        if (stream_) cudaStreamDestroy(stream_);
        cudaGetLastError();
        throw;
    }
}

CudaBackend::~CudaBackend() {
    cudaSetDevice(ordinal_);
    cudaStreamSynchronize(stream_);
    if (blas_) cublas().destroy(blas_);
    freeNow(blas_ws_);
    freeNow(lowp_ws_);
    freeNow(scan_ws_);
    for (float* p : train_ws_) freeNow(p);
    releaseRetired();
    if (pin_up_) cudaFreeHost(pin_up_);
    if (pin_down_) cudaFreeHost(pin_down_);
    cudaEventDestroy(up_done_);
    cudaStreamDestroy(stream_);
}

void CudaBackend::enter() {
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != ordinal_) check(cudaSetDevice(ordinal_), "cudaSetDevice");
}

Exec CudaBackend::nextExec() {
    Exec e = exec_;
    e.pdl = pdl_ && !serialize_next_;
    serialize_next_ = false;
    return e;
}

void CudaBackend::setMath(int mode) {
    if (mode == math_mode_) return;
    checkCublas(cublas().setMathMode(blas_, mode), "cublasSetMathMode");
    math_mode_ = mode;
}

void CudaBackend::setScanAlgo(ScanAlgo algo, int chunk) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    flush();
    scan_algo_ = algo;
    scan_chunk_ = chunk;
}

void CudaBackend::setPdl(bool on) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    flush();
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal_);
    pdl_ = on && major >= 9;
}

void CudaBackend::setFusion(bool on) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    flush();
    fuse_ = on;
}

void CudaBackend::flushPending() {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    enter();
    flush();
}

void CudaBackend::flush() {
    if (pn_.on) {
        pn_.on = false;
        cuda::rmsnorm(nextExec(), pn_.x, pn_.ldx, pn_.w, pn_.rows, pn_.d, pn_.eps, pn_.y, pn_.ldy);
    }
    if (pl_.on) {
        pl_.on = false;
        runLinear(pl_.x, pl_.ldx, pl_.rows, pl_.w, pl_.bias, pl_.y, pl_.ldy, pl_.beta);
    }
}

// ---- memory ----

float* CudaBackend::alloc(int64_t n) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (n < 0) throw std::invalid_argument("alloc: negative size " + std::to_string(n));
    if (capturing_) throw std::logic_error("CudaBackend::alloc called during a CUDA graph capture");
    enter();
    const size_t bytes = static_cast<size_t>(n > 0 ? n : 1) * sizeof(float);
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();  // allocation failures are not sticky: clear and carry on
        if (e == cudaErrorMemoryAllocation) {
            size_t free_b = 0, total_b = 0;
            cudaMemGetInfo(&free_b, &total_b);
            cudaGetLastError();
            throw OutOfMemoryError("cudaMalloc of " + std::to_string(bytes) + " bytes on cuda:" +
                                   std::to_string(ordinal_) + " failed (" + mib(free_b) + " free of " +
                                   mib(total_b) + ")");
        }
        throwCuda(e, "cudaMalloc of " + std::to_string(bytes) + " bytes");
    }
    const cudaError_t z = cudaMemsetAsync(p, 0, bytes, stream_);
    if (z != cudaSuccess) {
        cudaFree(p);
        throwCuda(z, "cudaMemsetAsync");
    }
    return static_cast<float*>(p);
}

void CudaBackend::freeNow(void* p) noexcept {
    if (!p) return;
    cudaStreamSynchronize(stream_);  // no queued kernel may still use it
    cudaFree(p);
    cudaGetLastError();
}

void CudaBackend::release(float* p) noexcept {
    if (!p) return;
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (cudaSetDevice(ordinal_) != cudaSuccess) cudaGetLastError();
    try {
        flush();  // a pending stage may read p
    } catch (...) {
        // its error surfaces again at the next synchronising call
    }
    if (capturing_) {  // cudaFree would break the capture; free it when the capture ends
        deferred_.push_back(p);
        return;
    }
    freeNow(p);
}

void CudaBackend::releaseRetired() noexcept {
    for (void* p : retired_) freeNow(p);
    retired_.clear();
}

void* CudaBackend::pinned(void*& buf, size_t& cap, size_t bytes) {
    if (bytes > kPinnedMaxBytes) return nullptr;
    if (bytes <= cap) return buf;
    size_t want = std::max<size_t>(cap ? cap * 2 : (1u << 20), bytes);
    want = std::min(std::max(want, bytes), kPinnedMaxBytes);
    void* p = nullptr;
    if (cudaHostAlloc(&p, want, cudaHostAllocDefault) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;  // fall back to pageable transfers
    }
    if (buf) cudaFreeHost(buf);  // callers made sure no copy still reads or writes it
    buf = p;
    cap = want;
    return buf;
}

void CudaBackend::upload(float* dst, const float* host, int64_t n) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (n <= 0) return;
    enter();
    flush();
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    serialize_next_ = true;  // uploads may write weights: the next kernel must not prefetch them early
    check(cudaEventSynchronize(up_done_), "cudaEventSynchronize (upload staging)");
    if (void* stage = capturing_ ? nullptr : pinned(pin_up_, pin_up_cap_, bytes)) {
        // Through pinned memory: the caller's buffer is free on return, and the copy itself runs
        // asynchronously in stream order (nothing waits for it here).
        std::memcpy(stage, host, bytes);
        check(cudaMemcpyAsync(dst, stage, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (host to device)");
        check(cudaEventRecord(up_done_, stream_), "cudaEventRecord");
        return;
    }
    check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (host to device)");
    // The caller may reuse its buffer as soon as we return, pinned or not.
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize after upload");
}

void CudaBackend::download(float* host, const float* src, int64_t n) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (n <= 0) return;
    enter();
    flush();
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    if (void* stage = capturing_ ? nullptr : pinned(pin_down_, pin_down_cap_, bytes)) {
        check(cudaMemcpyAsync(stage, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (device to host)");
        check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize after download");
        std::memcpy(host, stage, bytes);
        return;
    }
    check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (device to host)");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize after download");
}

void CudaBackend::copy(float* dst, const float* src, int64_t n) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (n <= 0 || dst == src) return;
    enter();
    flush();
    check(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
          "cudaMemcpyAsync (device to device)");
}

void CudaBackend::zero(float* p, int64_t n) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (n <= 0) return;
    enter();
    flush();
    check(cudaMemsetAsync(p, 0, static_cast<size_t>(n) * sizeof(float), stream_), "cudaMemsetAsync");
}

// ---- stages ----

void CudaBackend::linear(const float* x, int64_t ldx, int64_t rows, const Matrix& w, const float* bias, float* y,
                         int64_t ldy, float beta) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (rows <= 0) return;
    enter();
    const bool lowp = w.lowp && (w.lowp_dtype == DTYPE_BF16 || w.lowp_dtype == DTYPE_F16);
    const int wdtype = lowp ? w.lowp_dtype : DTYPE_F32;
    const void* wp = lowp ? w.lowp : w.f32;
    // rmsnorm → linear on its output: one gemv kernel normalises its input itself.
    if (pn_.on && x == pn_.y && ldx == pn_.ldy && rows == pn_.rows && w.in == pn_.d && rows <= kGemvMaxRows &&
        gemvNormFusable(wp, wdtype, w.in) && disjoint(y, rows * ldy, pn_.x, rows * pn_.ldx) &&
        disjoint(y, rows * ldy, pn_.y, rows * pn_.ldy)) {
        pn_.on = false;
        const NormPrologue norm{pn_.x, pn_.ldx, pn_.w, pn_.eps, pn_.y, pn_.ldy};
        gemv(nextExec(), x, ldx, static_cast<int>(rows), wp, wdtype, w.out, w.in, bias, y, ldy, beta, &norm);
        return;
    }
    flush();
    // A narrow decode linear may be the scan's Δ projection: keep it until we see the next call.
    if (fuse_ && rows <= kGemvMaxRows && beta == 0.f && w.in <= kDtFuseMaxRank) {
        pl_ = PendingLinear{true, x, ldx, rows, w, bias, y, ldy, beta};
        return;
    }
    runLinear(x, ldx, rows, w, bias, y, ldy, beta);
}

void CudaBackend::runLinear(const float* x, int64_t ldx, int64_t rows, const Matrix& w, const float* bias, float* y,
                            int64_t ldy, float beta) {
    const bool lowp = w.lowp && (w.lowp_dtype == DTYPE_BF16 || w.lowp_dtype == DTYPE_F16);
    const int wdtype = lowp ? w.lowp_dtype : DTYPE_F32;
    const Exec e = nextExec();
    if (rows <= kGemvMaxRows) {
        // Decode: HBM-bound matrix-vector products; f32 storage (F32 and TF32) runs in exact f32 here.
        gemv(e, x, ldx, static_cast<int>(rows), lowp ? w.lowp : w.f32, wdtype, w.out, w.in, bias, y, ldy, beta);
        return;
    }
    // cuBLAS is column-major: row-major y[rows, out] (stride ldy) is the column-major out×rows matrix C
    // with ldc = ldy, x is in×rows with ld = ldx, and W [out, in] is in×out with ld = in, so
    // C = op(W)ᵀ-as-stored · x, i.e. transa = T, transb = N, m = out, n = rows, k = in.
    if (bias) {
        biasInit(e, y, ldy, rows, w.out, bias, beta);
        beta = 1.f;
    }
    const CublasApi& api = cublas();
    const float one = 1.f;
    const int m = w.out, k = w.in;
    if (!lowp) {
        setMath(w.lowp_dtype == DTYPE_TF32 ? kCublasTf32TensorOpMath : kCublasDefaultMath);
        checkCublas(api.sgemm(blas_, kCublasOpT, kCublasOpN, m, toInt(rows, "rows"), k, &one, w.f32, k, x,
                              toInt(ldx, "ldx"), &beta, y, toInt(ldy, "ldy")),
                    "cublasSgemm_v2");
        return;
    }
    // bf16/f16 weights: cublasGemmEx needs both operands in 16 bits, so the activations are packed to the
    // weight type in a fixed workspace (chunks of rows), products accumulate in f32 into f32 y.
    setMath(kCublasDefaultMath);
    const cudaDataType type = wdtype == DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(lowp_ws_bytes_ / 2) / k);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        const int64_t n = std::min(chunk, rows - r0);
        rowsToLowp(e, x + r0 * ldx, ldx, n, k, lowp_ws_, wdtype);
        checkCublas(api.gemmEx(blas_, kCublasOpT, kCublasOpN, m, static_cast<int>(n), k, &one, w.lowp, type, k,
                               lowp_ws_, type, k, &beta, y + r0 * ldy, CUDA_R_32F, toInt(ldy, "ldy"),
                               kCublasCompute32F, kCublasGemmDefault),
                    "cublasGemmEx");
    }
}

void CudaBackend::rmsnorm(const float* x, int64_t ldx, const float* w, int64_t rows, int d, float eps, float* y,
                          int64_t ldy) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    enter();
    if (rows > std::numeric_limits<int>::max()) throw std::invalid_argument("rmsnorm: too many rows");
    flush();
    if (fuse_ && rows >= 1 && rows <= kGemvMaxRows && d <= kNormFuseMaxWidth &&
        disjoint(x, rows * ldx, y, rows * ldy)) {
        pn_ = PendingNorm{true, x, ldx, w, rows, d, eps, y, ldy};  // a linear on y may take it over
        return;
    }
    cuda::rmsnorm(nextExec(), x, ldx, w, rows, d, eps, y, ldy);
}

void CudaBackend::embed(const float* table, const int32_t* ids, int64_t rows, int d, float* out) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    enter();
    flush();
    if (rows > std::numeric_limits<int>::max()) throw std::invalid_argument("embed: too many rows");
    cuda::embed(nextExec(), table, ids, rows, d, out);
}

void CudaBackend::negExp(const float* a_log, float* a, int64_t n) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    enter();
    flush();
    cuda::negExp(nextExec(), a_log, a, n);
    serialize_next_ = true;  // A is read before pdlWait() by the scan
}

void CudaBackend::toLowPrecision(const float* src, void* dst, int64_t n, int dtype) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    enter();
    flush();
    toLowp(nextExec(), src, dst, n, dtype);
    serialize_next_ = true;  // weights are prefetched before pdlWait() by the gemv
}

void CudaBackend::convSilu(const ConvArgs& args) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    enter();
    flush();
    cuda::convSilu(nextExec(), args);
}

void CudaBackend::selectiveScan(const ScanArgs& args) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    enter();
    if (pl_.on && pl_.y == args.dt && pl_.ldy == args.channels && pl_.w.out == args.channels && pl_.beta == 0.f &&
        pl_.rows == static_cast<int64_t>(args.batch) * args.steps) {
        const Exec e = exec_;
        const ScanPlan plan = planScan(e, args, scan_algo_, scan_chunk_);
        const int64_t R = pl_.rows;
        if (dtProjectionFusable(args, plan) && disjoint(pl_.y, R * pl_.ldy, pl_.x, R * pl_.ldx)) {
            pl_.on = false;
            const bool lowp = pl_.w.lowp && (pl_.w.lowp_dtype == DTYPE_BF16 || pl_.w.lowp_dtype == DTYPE_F16);
            const DtProjection dt{lowp ? pl_.w.lowp : pl_.w.f32, lowp ? pl_.w.lowp_dtype : DTYPE_F32, pl_.x, pl_.ldx,
                                  pl_.bias, pl_.w.in, pl_.y, false};
            cuda::selectiveScan(nextExec(), args, plan, nullptr, &dt);
            return;
        }
    }
    flush();
    const Exec e = nextExec();
    ScanPlan plan = planScan(e, args, scan_algo_, scan_chunk_);
    if (plan.chunked && plan.workspace_floats > scan_ws_floats_) {
        if (capturing_) {
            plan = planScan(e, args, ScanAlgo::Sequential);  // no allocation inside a capture
        } else {
            float* bigger = alloc(plan.workspace_floats);
            if (scan_ws_) {
                if (live_graphs_ > 0) retired_.push_back(scan_ws_);
                else freeNow(scan_ws_);
            }
            scan_ws_ = bigger;
            scan_ws_floats_ = plan.workspace_floats;
        }
    }
    cuda::selectiveScan(e, args, plan, scan_ws_);
}

// ---- training ----

Exec CudaBackend::trainEnter() {
    enter();
    flush();
    return nextExec();
}

float* CudaBackend::growTrainWorkspace(void* self, int slot, int64_t floats) {
    CudaBackend& be = *static_cast<CudaBackend*>(self);
    if (slot < 0 || slot >= kTrainSlots) throw std::logic_error("training workspace slot out of range");
    if (floats > be.train_ws_floats_[slot]) {
        // Grow with headroom so slowly growing shapes do not reallocate every call.
        const int64_t want = std::max<int64_t>(floats, be.train_ws_floats_[slot] + be.train_ws_floats_[slot] / 2);
        float* bigger = be.alloc(want);
        be.freeNow(be.train_ws_[slot]);  // synchronises first: queued kernels may still use the old one
        be.train_ws_[slot] = bigger;
        be.train_ws_floats_[slot] = want;
    }
    return be.train_ws_[slot];
}

train::Scratch CudaBackend::trainScratch() { return train::Scratch{this, &CudaBackend::growTrainWorkspace}; }

void CudaBackend::linearBackward(const float* dy, int64_t lddy, int64_t rows, const Matrix& w, float* dx, int64_t lddx,
                                 float beta) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (rows <= 0) return;
    trainEnter();
    setMath(kCublasDefaultMath);  // true f32, whatever the forward's storage
    train::linearBackward(blas_, dy, lddy, rows, w.f32, w.out, w.in, dx, lddx, beta);
}

void CudaBackend::linearWeightGrad(const float* dy, int64_t lddy, const float* x, int64_t ldx, int64_t rows, int out,
                                   int in, float* dw, float* dbias) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (rows <= 0) return;
    const Exec e = trainEnter();
    setMath(kCublasDefaultMath);
    train::linearWeightGrad(e, blas_, dy, lddy, x, ldx, rows, out, in, dw, dbias, trainScratch());
}

void CudaBackend::rmsnormBackward(const float* x, int64_t ldx, const float* w, const float* dy, int64_t lddy,
                                  int64_t rows, int d, float eps, float* dx, int64_t lddx, float beta, float* dw) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (rows <= 0) return;
    const Exec e = trainEnter();
    train::rmsnormBackward(e, x, ldx, w, dy, lddy, rows, d, eps, dx, lddx, beta, dw, trainScratch());
}

void CudaBackend::convSiluBackward(const ConvBackwardArgs& args) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    const Exec e = trainEnter();
    train::convSiluBackward(e, args, trainScratch());
}

void CudaBackend::selectiveScanTrain(const ScanArgs& args, float* checkpoints, int chunk) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    const Exec e = trainEnter();
    train::selectiveScanTrain(e, args, checkpoints, chunk);
}

void CudaBackend::selectiveScanBackward(const ScanBackwardArgs& args) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    const Exec e = trainEnter();
    train::selectiveScanBackward(e, args, trainScratch());
}

void CudaBackend::scale(float* x, int64_t n, float s) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (n <= 0) return;  // (also the trainer's probe for training support)
    const Exec e = trainEnter();
    train::scale(e, x, n, s);
}

double CudaBackend::sumOfSquares(const float* x, int64_t n) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (n <= 0) return 0.0;
    const Exec e = trainEnter();
    return train::sumOfSquares(e, x, n, trainScratch());
}

void CudaBackend::adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWArgs& args) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (n <= 0) return;
    const Exec e = trainEnter();
    train::adamw(e, p, g, m, v, n, args);
    serialize_next_ = true;  // weights changed: the next kernel must not prefetch them before its pdlWait()
}

double CudaBackend::mse(const float* y, const float* target, int64_t n, float scale, float* dy) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (n <= 0) return 0.0;
    const Exec e = trainEnter();
    return train::mse(e, y, target, n, scale, dy, trainScratch());
}

void CudaBackend::crossEntropy(const float* logits, int64_t rows, int vocab, const int32_t* targets, int ignore_index,
                               float scale, float* loss, float* correct, float* dlogits) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (rows <= 0) return;
    const Exec e = trainEnter();
    train::crossEntropy(e, logits, rows, vocab, targets, ignore_index, scale, loss, correct, dlogits);
}

// ---- graphs ----

void CudaBackend::beginCapture() {
    mu_.lock();  // held until endCapture(): no other thread's work may enter the graph
    try {
        if (capturing_) throw std::logic_error("beginCapture: a capture is already in progress");
        enter();
        flush();  // pending eager work stays eager
        check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
        capturing_ = true;
        serialize_next_ = true;  // the graph's first kernel follows an upload
    } catch (...) {
        mu_.unlock();
        throw;
    }
}

void* CudaBackend::endCapture() {
    if (!capturing_) throw std::logic_error("endCapture without beginCapture");
    std::unique_lock<std::recursive_mutex> lock(mu_, std::adopt_lock);  // the hold taken in beginCapture
    cudaError_t flushed = cudaSuccess;
    try {
        flush();  // the pending stage belongs to the graph
    } catch (...) {
        flushed = cudaErrorUnknown;
        pn_.on = pl_.on = false;
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t e = cudaStreamEndCapture(stream_, &graph);
    capturing_ = false;
    for (void* p : deferred_) freeNow(p);
    deferred_.clear();
    if (e != cudaSuccess || flushed != cudaSuccess) {
        if (graph) cudaGraphDestroy(graph);
        throwCuda(e != cudaSuccess ? e : flushed, "CUDA graph capture (cudaStreamEndCapture)");
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t ie = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check(ie, "cudaGraphInstantiate");
    ++live_graphs_;
    return exec;
}

void CudaBackend::replay(void* graph) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (!graph) throw std::invalid_argument("replay: null graph");
    enter();
    flush();
    check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), stream_), "cudaGraphLaunch");
}

void CudaBackend::destroyGraph(void* graph) noexcept {
    if (!graph) return;
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (cudaSetDevice(ordinal_) != cudaSuccess) cudaGetLastError();
    cudaStreamSynchronize(stream_);  // a replay may still be running
    cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph));
    cudaGetLastError();
    if (--live_graphs_ <= 0) {
        live_graphs_ = 0;
        releaseRetired();
    }
}

void CudaBackend::synchronize() {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    enter();
    flush();
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

}  // namespace cuda

Backend& cudaBackend(int ordinal) {
    const int n = cudaDeviceCount();
    if (n == 0) throw std::runtime_error("no CUDA device: " + cudaUnavailableReason());
    if (ordinal < 0 || ordinal >= n)
        throw std::runtime_error("no CUDA device " + std::to_string(ordinal) + ": " + std::to_string(n) + " present");
    static std::mutex mu;
    static std::vector<cuda::CudaBackend*> backends;  // never destroyed: the driver may be gone at exit
    std::lock_guard<std::mutex> lock(mu);
    if (backends.size() < static_cast<size_t>(n)) backends.resize(static_cast<size_t>(n), nullptr);
    if (!backends[ordinal]) backends[ordinal] = new cuda::CudaBackend(ordinal);
    return *backends[ordinal];
}

}  // namespace mamba
