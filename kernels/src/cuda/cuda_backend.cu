// The CUDA backend context: device memory, transfers, the inference stages with their two named fusions,
// the training stages, and CUDA graphs. Products are in gemm/gemm.cu; kernels in one file per stage
// (kernels.h, train_kernels.h list them).
#include "cuda_backend.h"
#include "gemm/gemm_tc.h"

#include "mamba/mamba.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <string>

namespace mamba::cuda {

namespace {
constexpr size_t kCublasWorkspaceBytes = 32u << 20;  // cuBLAS' recommendation for Hopper
constexpr size_t kLowpWorkspaceBytes = 32u << 20;    // bf16/f16 activations of one cuBLAS chunk
constexpr size_t kPinnedMaxBytes = 64u << 20;        // larger transfers go straight from pageable memory

std::string mib(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

bool envOff(const char* name) {
    const char* v = std::getenv(name);
    return v && std::strcmp(v, "0") == 0;
}

/**
 * The capture gate. cudaFree, cudaFreeHost and cuBLAS handle creation/destruction synchronise the whole device,
 * and a device-wide synchronisation issued by ANY thread while another thread captures a graph invalidates that
 * capture (seen with 8 models on 8 threads: cudaErrorStreamCaptureInvalidated), whatever the capture mode. So
 * every capture holds the gate shared from begin to end, and those calls hold it exclusively: they wait for the
 * captures in flight, and no capture starts while they run. A capturing thread never asks for it exclusively
 * (its frees are deferred to after the capture), so the gate cannot deadlock.
 */
std::shared_mutex& captureGate() {
    static std::shared_mutex gate;
    return gate;
}
using OutsideCaptures = std::unique_lock<std::shared_mutex>;

}  // namespace

// ---- the context ----

CudaBackend::CudaBackend(int ordinal) : ordinal_(ordinal) {
    check(cudaSetDevice(ordinal), "cudaSetDevice");
    exec_ = deviceExec(ordinal);
    pdl_ = exec_.cc >= 90 && !envOff("MAMBA_CUDA_PDL");
    fuse_ = !envOff("MAMBA_CUDA_FUSE");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    exec_.stream = stream_;
    exec_.pdl = pdl_;
}

CudaBackend::~CudaBackend() {
    // Errors are ignored: a destructor must not throw, and the device may be in any state here.
    cudaSetDevice(ordinal_);
    cudaStreamSynchronize(stream_);
    if (blas_) {  // (the library was loaded when the handle was made)
        OutsideCaptures gate(captureGate());
        cublas().destroy(blas_);
    }
    freeNow(blas_ws_);
    freeNow(lowp_ws_);
    freeNow(pack_ws_);
    freeNow(scan_ws_);
    for (float* p : train_ws_) freeNow(p);
    for (void* p : deferred_) freeNow(p);
    releaseRetired();
    {
        OutsideCaptures gate(captureGate());
        if (pin_up_) cudaFreeHost(pin_up_);
        if (pin_down_) cudaFreeHost(pin_down_);
    }
    if (up_done_) cudaEventDestroy(up_done_);
    cudaStreamDestroy(stream_);
    cudaGetLastError();
}

Capabilities CudaBackend::capabilities() const {
    Capabilities c;
    c.host = false;
    c.training = true;
    c.graphs = true;
    c.lowp_storage = true;
    c.logits_block_floats = int64_t{1} << 26;  // 256 MiB of f32 logits: the head's products run at GEMM speed
    c.rounds_backward_operands = true;
    return c;
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

void CudaBackend::requireNotCapturing(const char* what) const {
    if (capturing_)
        throw std::logic_error(std::string("CUDA backend: ") + what + " is not allowed during a CUDA graph capture");
}

void* CudaBackend::deviceMalloc(size_t bytes, const char* what) {
    requireNotCapturing("allocating device memory");
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaSuccess) return p;
    cudaGetLastError();  // allocation failures are not sticky: clear and carry on
    if (e == cudaErrorMemoryAllocation) {
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        cudaGetLastError();
        throw OutOfMemoryError(std::string(what) + ": cudaMalloc of " + std::to_string(bytes) + " bytes on cuda:" +
                               std::to_string(ordinal_) + " failed (" + mib(free_b) + " free of " + mib(total_b) + ")");
    }
    throwCuda(e, std::string(what) + ": cudaMalloc of " + std::to_string(bytes) + " bytes");
}

cublasHandle CudaBackend::blas() {
    if (blas_) return blas_;
    requireNotCapturing("creating the cuBLAS handle");
    OutsideCaptures gate(captureGate());  // creation allocates and may synchronise the device
    const CublasApi& api = cublas();
    cublasHandle h = nullptr;
    checkCublas(api.create(&h), "cublasCreate_v2");
    void* ws = nullptr;
    try {
        checkCublas(api.setStream(h, stream_), "cublasSetStream_v2");
        // A fixed workspace, set before any capture: captured products then allocate nothing.
        ws = deviceMalloc(kCublasWorkspaceBytes, "cuBLAS workspace");
        checkCublas(api.setWorkspace(h, ws, kCublasWorkspaceBytes), "cublasSetWorkspace_v2");
        checkCublas(api.setMathMode(h, kCublasDefaultMath), "cublasSetMathMode");
    } catch (...) {
        api.destroy(h);
        if (ws) cudaFree(ws);
        cudaGetLastError();
        throw;
    }
    blas_ = h;
    blas_ws_ = ws;
    math_mode_ = kCublasDefaultMath;
    return blas_;
}

void* CudaBackend::lowpWorkspace() {
    if (!lowp_ws_) {
        requireNotCapturing("creating the activation workspace");
        lowp_ws_ = deviceMalloc(kLowpWorkspaceBytes, "activation workspace");
        lowp_ws_bytes_ = kLowpWorkspaceBytes;
    }
    return lowp_ws_;
}

void* CudaBackend::packWorkspace(size_t bytes) {
    if (bytes > pack_ws_bytes_) {
        // headroom, so that slowly growing shapes do not reallocate every call; never inside a capture (the eager
        // steps before one have grown it)
        const size_t want = std::max(bytes, std::min(kPackWorkspaceMaxBytes, pack_ws_bytes_ + pack_ws_bytes_ / 2));
        void* bigger = deviceMalloc(want, "backward product workspace");
        if (pack_ws_) {
            if (live_graphs_ > 0) retired_.push_back(pack_ws_);  // a live graph may still use it
            else freeNow(pack_ws_);
        }
        pack_ws_ = bigger;
        pack_ws_bytes_ = want;
    }
    return pack_ws_;
}

void CudaBackend::setMath(int mode) {
    if (mode == math_mode_) return;
    checkCublas(cublas().setMathMode(blas(), mode), "cublasSetMathMode");
    math_mode_ = mode;
}

void CudaBackend::setScanAlgo(ScanAlgo algo, int chunk) {
    Lock lock(mu_);
    scan_algo_ = algo;
    scan_chunk_ = chunk;
}

void CudaBackend::setPdl(bool on) {
    Lock lock(mu_);
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal_) != cudaSuccess) cudaGetLastError();
    pdl_ = on && major >= 9;
}

void CudaBackend::setFusion(bool on) {
    Lock lock(mu_);
    fuse_ = on;
}

void CudaBackend::setGemvGroup(int G) {
    Lock lock(mu_);
    exec_.gemv_group = G;
}

// ---- memory ----

float* CudaBackend::alloc(int64_t n) {
    Lock lock(mu_);
    if (n < 0) throw std::invalid_argument("alloc: negative size " + std::to_string(n));
    requireNotCapturing("alloc");
    enter();
    const size_t bytes = static_cast<size_t>(n > 0 ? n : 1) * sizeof(float);
    void* p = deviceMalloc(bytes, "alloc");
    const cudaError_t z = cudaMemsetAsync(p, 0, bytes, stream_);
    if (z != cudaSuccess) {
        freeNow(p);
        throwCuda(z, "cudaMemsetAsync");
    }
    return static_cast<float*>(p);
}

void CudaBackend::freeNow(void* p) noexcept {
    if (!p) return;
    cudaStreamSynchronize(stream_);  // no queued kernel may still use it
    OutsideCaptures gate(captureGate());
    cudaFree(p);
    cudaGetLastError();
    ++frees_;  // a graph captured before may point into this memory
}

void CudaBackend::release(float* p) noexcept {
    if (!p) return;
    Lock lock(mu_);
    if (cudaSetDevice(ordinal_) != cudaSuccess) cudaGetLastError();
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
    if (buf) {  // callers made sure no copy still reads or writes it
        OutsideCaptures gate(captureGate());
        cudaFreeHost(buf);
    }
    buf = p;
    cap = want;
    return buf;
}

namespace {
/** Whether host memory is page-locked (mamba::HostBuffer, cudaHostAlloc or cudaHostRegister): DMA reads it as it is. */
bool pageLocked(const void* p) {
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeHost;
}
}  // namespace

void CudaBackend::upload(float* dst, const float* host, int64_t n) {
    Lock lock(mu_);
    if (n <= 0) return;
    requireNotCapturing("upload");  // a captured copy would replay whatever the staging buffer holds then
    enter();
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    serialize_next_ = true;  // uploads may write weights: the next kernel must not prefetch them early
    // the caller's page-locked memory (mamba::HostBuffer) is copied from as it is: no staging copy, any size
    void* stage = nullptr;
    if (!pageLocked(host)) {
        if (!up_done_) check(cudaEventCreateWithFlags(&up_done_, cudaEventDisableTiming), "cudaEventCreate");
        check(cudaEventSynchronize(up_done_), "cudaEventSynchronize (upload staging)");
        stage = pinned(pin_up_, pin_up_cap_, bytes);
    }
    if (stage) {
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
    Lock lock(mu_);
    if (n <= 0) return;
    requireNotCapturing("download");
    enter();
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    // straight into the caller's page-locked memory, else through the staging buffer
    if (void* stage = pageLocked(host) ? nullptr : pinned(pin_down_, pin_down_cap_, bytes)) {
        check(cudaMemcpyAsync(stage, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (device to host)");
        check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize after download");
        std::memcpy(host, stage, bytes);
        return;
    }
    check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (device to host)");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize after download");
}

void CudaBackend::copy(float* dst, const float* src, int64_t n) {
    Lock lock(mu_);
    if (n <= 0 || dst == src) return;
    enter();
    check(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
          "cudaMemcpyAsync (device to device)");
}

void CudaBackend::zero(float* p, int64_t n) {
    Lock lock(mu_);
    if (n <= 0) return;
    enter();
    check(cudaMemsetAsync(p, 0, static_cast<size_t>(n) * sizeof(float), stream_), "cudaMemsetAsync");
}

void CudaBackend::synchronize() {
    Lock lock(mu_);
    requireNotCapturing("synchronize");
    enter();
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

// ---- inference stages ----

void CudaBackend::rmsnorm(const RmsNormArgs& a) {
    checkRmsNormOutputs(a);
    Lock lock(mu_);
    enter();
    cuda::rmsnorm(nextExec(), a);
}

namespace {
void requireNormLinearContract(const RmsNormArgs& norm, const Gemm& linear) {
    if (linear.kind != GemmKind::Forward) fail("normLinear: the product must be a Forward product");
    checkRmsNormOutputs(norm);
    if (norm.y16.data) {  // rounded rows: the product takes them as its rounded x
        if (linear.a16 != norm.y16.data || linear.lda16 != norm.y16.ld)
            fail("normLinear: the product's rounded x (a16, lda16) must be the rmsnorm's rounded output (y16)");
    } else if (linear.a != norm.y) {
        fail("normLinear: the product's input must be the rmsnorm's output");
    }
    if (linear.rows != norm.rows)
        fail("normLinear: the product has " + std::to_string(linear.rows) + " rows, the rmsnorm " +
             std::to_string(norm.rows));
    if (linear.w.in != norm.d)
        fail("normLinear: the weight takes " + std::to_string(linear.w.in) + " inputs, the rmsnorm writes " +
             std::to_string(norm.d));
    if (linear.rows > 1 && norm.y && linear.lda != norm.ldy)
        fail("normLinear: the product reads its input with stride " + std::to_string(linear.lda) +
             ", the rmsnorm writes stride " + std::to_string(norm.ldy));
}
}  // namespace

CudaBackend::NormFusion CudaBackend::normFusion(const RmsNormArgs& norm, const Gemm& linear, const ConvEpilogue* conv) const {
    // One kernel normalises its input rows on chip and writes them to norm.y as well. Its blocks read norm.x while
    // block 0 writes norm.y and every block writes y, so those may not overlap.
    const int64_t rows = linear.rows;
    const Matrix& w = linear.w;
    // (the fused kernels keep no rounded x, and write no rounded rows)
    if (!fuse_ || rows < 1 || linear.keep16 || norm.y16.data) return NormFusion::kNone;
    const void* wp = forwardStorage(w, "normLinear");
    NormFusion kind = NormFusion::kNone;
    if (linear.mode == GemmMode::Deterministic) {
        // The tensor-core tier's chain tile keeps the bits of the two ops apart (rmsnorm_row.cuh, conv_step.cuh); the
        // gemv's prologue sums in another order, so the scalar tier (F32 weights) never fuses.
        if (tensorTierFuses(exec_, rows, wp, w.dtype, w.out, w.in, conv)) kind = NormFusion::kTensorChain;
    } else if (rows <= fastGemvMaxRows(w.dtype) && gemvNormFusable(exec_, static_cast<int>(rows), wp, w.dtype, w.in) &&
               gemvNormFusionPays(exec_, static_cast<int>(rows), w.dtype, w.out, w.in) &&
               (!conv || (rows == 1 && conv->width >= 1 && conv->width <= kConvEpilogueMaxWidth && conv->channels <= w.out))) {
        kind = NormFusion::kGemv;
    }
    if (kind == NormFusion::kNone) return kind;
    const int64_t x_n = span(rows, norm.ldx, norm.d), y_n = span(rows, norm.ldy, norm.d);
    const int64_t c_n = span(rows, linear.ldc, w.out);
    const bool apart = disjoint(norm.x, x_n, norm.y, y_n) && disjoint(linear.c, c_n, norm.x, x_n) &&
                       disjoint(linear.c, c_n, norm.y, y_n);
    return apart ? kind : NormFusion::kNone;
}

bool CudaBackend::normLinearFuses(const RmsNormArgs& norm, const Gemm& linear) {
    Lock lock(mu_);
    requireNormLinearContract(norm, linear);
    return normFusion(norm, linear, nullptr) != NormFusion::kNone;
}

void CudaBackend::normLinear(const RmsNormArgs& norm, const Gemm& linear) {
    Lock lock(mu_);
    requireNormLinearContract(norm, linear);
    enter();
    const NormFusion kind = normFusion(norm, linear, nullptr);
    if (kind != NormFusion::kNone) {
        fusedNormLinear(kind, norm, linear, nullptr);
        return;
    }
    cuda::rmsnorm(nextExec(), norm);
    runGemm(linear);
}

void CudaBackend::fusedNormLinear(NormFusion kind, const RmsNormArgs& norm, const Gemm& linear, const ConvEpilogue* conv) {
    const Matrix& w = linear.w;
    const NormPrologue prologue{norm.x, norm.ldx, norm.w, norm.eps, norm.y, norm.ldy};
    const void* wp = forwardStorage(w, "normLinear");
    if (kind == NormFusion::kTensorChain)
        gemmTensorTierFused(nextExec(), linear.rows, wp, w.dtype, w.out, w.in, linear.bias, linear.c, linear.ldc,
                            linear.beta, prologue, conv);
    else
        gemv(nextExec(), linear.a, linear.lda, static_cast<int>(linear.rows), wp, w.dtype, w.out, w.in, linear.bias,
             linear.c, linear.ldc, linear.beta, &prologue, conv);
}

void CudaBackend::normLinearConv(const RmsNormArgs& norm, const Gemm& linear, const ConvArgs& conv) {
    Lock lock(mu_);  // recursive: the unfused path takes it again
    requireNormLinearContract(norm, linear);
    // The conv step rides in the product's epilogue when the product is a fused decode product of one row, every conv
    // input is one of its outputs (one step, the x half first) and the conv's own buffers overlap none of the product's.
    const int64_t rows = linear.rows, H = static_cast<int64_t>(conv.channels) * (conv.width - 1);
    const ConvEpilogue step{conv.w, conv.bias, conv.history, conv.u, conv.channels, conv.width};
    NormFusion kind = NormFusion::kNone;
    if (rows == 1 && conv.steps == 1 && conv.batch == 1 && conv.x == linear.c && !conv.u16.data &&
        disjoint(conv.u, conv.channels, linear.c, linear.w.out) && disjoint(conv.history, H, linear.c, linear.w.out) &&
        disjoint(conv.u, conv.channels, conv.history, H))
        kind = normFusion(norm, linear, &step);
    if (kind == NormFusion::kNone) {
        Ops::normLinearConv(norm, linear, conv);  // the two ops, each on its own path
        return;
    }
    enter();
    fusedNormLinear(kind, norm, linear, &step);
}

void CudaBackend::embed(const Matrix& table, const int32_t* ids, int64_t rows, float* out) {
    Lock lock(mu_);
    enter();
    cuda::embed(nextExec(), forwardStorage(table, "embed"), table.dtype, ids, rows, table.in, out);
}

void CudaBackend::negExp(const float* a_log, float* a, int64_t n) {
    Lock lock(mu_);
    enter();
    cuda::negExp(nextExec(), a_log, a, n);
    serialize_next_ = true;  // A is read before pdlWait() by the scan
}

void CudaBackend::toLowPrecision(const float* src, void* dst, int64_t n, int dtype) {
    Lock lock(mu_);
    enter();
    toLowp(nextExec(), src, dst, n, dtype);
    serialize_next_ = true;  // weights are prefetched before pdlWait() by the gemv
}

void CudaBackend::fromLowPrecision(const void* src, int dtype, float* dst, int64_t n) {
    Lock lock(mu_);
    enter();
    fromLowp(nextExec(), src, dtype, dst, n);
    serialize_next_ = true;  // the f32 values may be weights, which the gemv prefetches before pdlWait()
}

void CudaBackend::convSilu(const ConvArgs& a) {
    Lock lock(mu_);
    checkConvOutputs(a);
    enter();
    cuda::convSilu(nextExec(), a);
}

ScanPlan CudaBackend::planFor(const ScanArgs& s, const ScanCheckpoints* ck) const {
    return planScan(exec_, s, scan_algo_, scan_chunk_, ck ? ck->chunk : 0);
}

namespace {
void requireDtProjectionContract(const ScanArgs& s, const Gemm& p) {
    const int64_t rows = static_cast<int64_t>(s.batch) * s.steps;
    if (p.kind != GemmKind::Forward) fail("selectiveScan: dtProj must be a Forward product");
    if (p.keep16) fail("selectiveScan: dtProj cannot keep its rounded x (keep16): it may run inside the scan");
    if (p.c != s.dt) fail("selectiveScan: dtProj must write the scan's dt");
    if (p.rows != rows)
        fail("selectiveScan: dtProj has " + std::to_string(p.rows) + " rows, the scan " + std::to_string(rows));
    if (p.w.out != s.channels)
        fail("selectiveScan: dtProj writes " + std::to_string(p.w.out) + " columns, the scan has " +
             std::to_string(s.channels) + " channels");
    if (p.rows > 1 && p.ldc != s.channels)
        fail("selectiveScan: dtProj writes dt with stride " + std::to_string(p.ldc) + ", the scan reads stride " +
             std::to_string(s.channels));
}
}  // namespace

bool CudaBackend::fuseDtProjection(const ScanArgs& s, const Gemm* p, const ScanCheckpoints* ck,
                                   const ScanPlan& plan) const {
    // The scan computes dt = x·W_dtᵀ + b per (row, channel) and writes it while other threads still read
    // their inputs: dt may overlap none of x, B/C, u and z.
    // Deterministic products never fuse: the fused Δ projection's arithmetic differs from the gemv's, and a
    // row's result may not depend on whether its batch was small enough to fuse.
    if (!p || ck || !fuse_ || p->mode == GemmMode::Deterministic) return false;
    const int64_t rows = p->rows;
    if (rows < 1 || rows > kGemvMaxRows || p->beta != 0.f || p->w.in > kDtFuseMaxRank || !dtProjectionFusable(s, plan))
        return false;
    const int64_t dt_n = span(rows, s.channels, s.channels);
    return disjoint(p->c, dt_n, p->a, span(rows, p->lda, p->w.in)) &&
           disjoint(p->c, dt_n, s.bc, span(rows, s.ldbc, 2 * static_cast<int64_t>(s.d_state))) &&
           disjoint(p->c, dt_n, s.u, span(rows, s.channels, s.channels)) &&
           disjoint(p->c, dt_n, s.z, span(rows, s.ldz, s.channels));
}

bool CudaBackend::scanFusesDtProjection(const ScanArgs& s, const Gemm* dtProj, const ScanCheckpoints* checkpoints) {
    Lock lock(mu_);
    if (dtProj) requireDtProjectionContract(s, *dtProj);
    return fuseDtProjection(s, dtProj, checkpoints, planFor(s, checkpoints));
}

void CudaBackend::selectiveScan(const ScanArgs& s, const Gemm* dtProj, const ScanCheckpoints* checkpoints) {
    Lock lock(mu_);
    checkScanOutputs(s);
    if (dtProj) requireDtProjectionContract(s, *dtProj);
    enter();
    ScanPlan plan = planFor(s, checkpoints);
    if (fuseDtProjection(s, dtProj, checkpoints, plan)) {
        const Gemm& p = *dtProj;
        const DtProjection dt{forwardStorage(p.w, "selectiveScan (dtProj)"), p.w.dtype, p.a, p.lda, p.bias, p.w.in,
                              p.c, false};
        cuda::selectiveScan(nextExec(), s, plan, nullptr, &dt);
        return;
    }
    if (dtProj) runGemm(*dtProj);
    const Exec e = nextExec();
    if (plan.chunked && plan.workspace_floats > scan_ws_floats_) {
        if (capturing_) {
            plan = planScan(e, s, ScanAlgo::Sequential, 0, checkpoints ? checkpoints->chunk : 0);  // no allocation in a capture
        } else {
            float* bigger = static_cast<float*>(deviceMalloc(static_cast<size_t>(plan.workspace_floats) * sizeof(float),
                                                             "scan workspace"));
            if (scan_ws_) {
                if (live_graphs_ > 0) retired_.push_back(scan_ws_);  // a live graph may still use it
                else freeNow(scan_ws_);
            }
            scan_ws_ = bigger;
            scan_ws_floats_ = plan.workspace_floats;
        }
    }
    cuda::selectiveScan(e, s, plan, scan_ws_, nullptr, checkpoints);
}

// ---- training ----

float* CudaBackend::growTrainWorkspace(void* self, int slot, int64_t floats) {
    CudaBackend& be = *static_cast<CudaBackend*>(self);
    if (slot < 0 || slot >= kTrainSlots) throw std::logic_error("training workspace slot out of range");
    if (floats > be.train_ws_floats_[slot]) {
        // Grow with headroom so slowly growing shapes do not reallocate every call.
        const int64_t want = std::max<int64_t>(floats, be.train_ws_floats_[slot] + be.train_ws_floats_[slot] / 2);
        float* bigger = static_cast<float*>(be.deviceMalloc(static_cast<size_t>(want) * sizeof(float),
                                                            "training workspace"));
        be.freeNow(be.train_ws_[slot]);  // synchronises first: queued kernels may still use the old one
        be.train_ws_[slot] = bigger;
        be.train_ws_floats_[slot] = want;
    }
    return be.train_ws_[slot];
}

train::Scratch CudaBackend::trainScratch() { return train::Scratch{this, &CudaBackend::growTrainWorkspace}; }

void CudaBackend::rmsnormBackward(const RmsNormBackwardArgs& a) {
    Lock lock(mu_);
    if (a.rows <= 0) return;
    enter();
    train::rmsnormBackward(nextExec(), a, trainScratch());
}

void CudaBackend::convSiluBackward(const ConvBackwardArgs& a) {
    Lock lock(mu_);
    enter();
    checkConvBackwardOutputs(a);
    train::convSiluBackward(nextExec(), a, trainScratch());
}

void CudaBackend::selectiveScanBackward(const ScanBackwardArgs& a) {
    Lock lock(mu_);
    enter();
    checkScanBackwardOutputs(a);
    train::selectiveScanBackward(nextExec(), a, trainScratch());
}

void CudaBackend::scale(float* x, int64_t n, float s) {
    Lock lock(mu_);
    if (n <= 0) return;
    enter();
    train::scale(nextExec(), x, n, s);
}

void CudaBackend::sumInto(const float* x, int64_t n, bool squares, double* out) {
    Lock lock(mu_);
    enter();
    train::sumInto(nextExec(), x, n, squares, out, trainScratch());
}

void CudaBackend::optimizerControl(const OptimizerControlArgs& a) {
    Lock lock(mu_);
    enter();
    train::optimizerControl(nextExec(), a);
}

void CudaBackend::adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWFactors* f, bool decayed) {
    Lock lock(mu_);
    if (n <= 0) return;
    enter();
    train::adamw(nextExec(), p, g, m, v, n, f, decayed);
    serialize_next_ = true;  // weights changed: the next kernel must not prefetch them before its pdlWait()
}

void CudaBackend::adamwGroup(const AdamWGroupArgs& a) {
    Lock lock(mu_);
    if (a.count <= 0 || a.n <= 0) return;
    // The table is in device memory (the trainer uploads it once): its offsets are the caller's promise, like the
    // pointers of every other op; the kernel reads only floats within [0, n) of the flat buffers.
    enter();
    train::adamwGroup(nextExec(), a, 0, a.n);
    serialize_next_ = true;  // weights changed: the next kernel must not prefetch them before its pdlWait()
}

void CudaBackend::mse(const float* y, const float* target, int64_t n, float scale, float* dy, double* out) {
    Lock lock(mu_);
    enter();
    train::mse(nextExec(), y, target, n, scale, dy, out, trainScratch());
}

void CudaBackend::crossEntropy(const CrossEntropyArgs& a) {
    Lock lock(mu_);
    checkCrossEntropyGrad(a);
    if (a.rows <= 0) return;
    enter();
    train::crossEntropy(nextExec(), a);
}

void CudaBackend::embedBackward(const EmbedBackwardArgs& a) {
    Lock lock(mu_);
    if (a.rows <= 0 || a.d <= 0) return;
    enter();  // (a sort workspace that had to grow inside a capture fails there: the allocation refuses)
    train::embedBackward(nextExec(), a, trainScratch());
}

void CudaBackend::sampleTokens(const SampleArgs& a) {
    Lock lock(mu_);
    if (a.batch <= 0) return;
    enter();
    cuda::sampleTokens(nextExec(), a);
}

// ---- graphs ----

void CudaBackend::beginCapture() {
    mu_.lock();  // held until endCapture() (same thread): no other call on this context may enter the graph
    try {
        if (capturing_) throw std::logic_error("beginCapture: a capture is already in progress");
        enter();
        // Whatever a captured product may need is created now, outside the capture (first use of graphs).
        try {
            blas();
            lowpWorkspace();
        } catch (const OutOfMemoryError&) {
            throw;
        } catch (const std::runtime_error&) {
            // no cuBLAS on this machine: products of more than kGemvMaxRows rows fail inside the capture
        }
        // Thread-local mode: only this thread's unsafe calls are checked, and only this stream is recorded,
        // so other contexts (other streams, other threads) neither break the capture nor enter it.
        captureGate().lock_shared();  // released in endCapture: no device-wide synchronisation until then
        const cudaError_t b = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal);
        if (b != cudaSuccess) {
            captureGate().unlock_shared();
            check(b, "cudaStreamBeginCapture");
        }
        capturing_ = true;
        serialize_next_ = true;  // the graph's first kernel follows an upload
    } catch (...) {
        mu_.unlock();
        throw;
    }
}

void* CudaBackend::endCapture() {
    mu_.lock();
    if (!capturing_) {
        mu_.unlock();
        throw std::logic_error("endCapture without beginCapture");
    }
    std::unique_lock<std::recursive_mutex> this_call(mu_, std::adopt_lock);
    std::unique_lock<std::recursive_mutex> from_begin(mu_, std::adopt_lock);  // the hold taken in beginCapture
    cudaGraph_t graph = nullptr;
    const cudaError_t e = cudaStreamEndCapture(stream_, &graph);
    capturing_ = false;
    captureGate().unlock_shared();
    for (void* p : deferred_) freeNow(p);
    deferred_.clear();
    for (void* old : deferred_graphs_) destroyGraph(old);
    deferred_graphs_.clear();
    if (e != cudaSuccess) {
        if (graph) cudaGraphDestroy(graph);
        throwCuda(e, "CUDA graph capture (cudaStreamEndCapture)");
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t ie = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check(ie, "cudaGraphInstantiate");
    ++live_graphs_;
    return exec;
}

void CudaBackend::replay(void* graph) {
    Lock lock(mu_);
    if (!graph) throw std::invalid_argument("replay: null graph");
    requireNotCapturing("replay");
    enter();
    check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), stream_), "cudaGraphLaunch");
}

void CudaBackend::destroyGraph(void* graph) noexcept {
    if (!graph) return;
    Lock lock(mu_);
    if (capturing_) {  // synchronising would break the capture: destroy it when the capture ends
        deferred_graphs_.push_back(graph);
        return;
    }
    if (cudaSetDevice(ordinal_) != cudaSuccess) cudaGetLastError();
    cudaStreamSynchronize(stream_);  // a replay may still be running
    cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph));
    cudaGetLastError();
    if (--live_graphs_ <= 0) {
        live_graphs_ = 0;
        releaseRetired();
    }
}

}  // namespace mamba::cuda
