// Selective scan: Δ = softplus(dt) → Ā = exp(Δ·A), h ← Ā·h + Δ·B·u → y = Σ_n h·C + D·u → y·SiLU(z).
//
// Thread layout (both algorithms): S lanes of a warp share one (row, channel); lane l owns the NS states
// n = l·NS … l·NS+NS-1 in registers (NS = 4 for d_state ≤ 128, 8 up to 256; S = d_state/NS rounded up
// to a power of two ≤ 32). y is reduced across the S lanes with shuffles each step.
//
// Sequential: each group walks t = 0 … T-1 with h in registers; h is read from and written back to the
// state. Ideal for decode (T = 1) and whenever B·channels·S threads already fill the GPU.
//
// Chunked (T ≥ kScanChunkedMinSteps and the sequential grid would leave the GPU mostly idle): T is split
// into C chunks so that about two GPU-fulls of threads run. Because the recurrence is linear,
//   h_end(chunk) = exp(A·ΣΔ) · h_start(chunk) + h_local(chunk)   (h_local: the chunk scanned from zero),
// so: (1) every chunk is scanned from zero in parallel, keeping h_local and ΣΔ; (2) one thread per
// (row, channel, state) walks the C chunks, turning h_local into each chunk's start state and writing
// the final state; (3) every chunk is scanned again from its start state, writing the outputs.
#include "kernels.h"

#include <algorithm>

namespace mamba::cuda {
namespace {

constexpr int kThreads = 128;

enum Mode { kWhole = 0, kChunkLocal = 1, kChunkOutput = 2 };

struct ScanKernelArgs {
    ScanArgs s;
    int lanes;       // S
    int chunk;       // steps per chunk (T for kWhole)
    int chunks;      // C (1 for kWhole)
    int mode;
    float* ws_h;     // [B, C, channels, d_state]: h_local, then start states
    float* ws_sum;   // [B, C, channels]: ΣΔ over each chunk
};

template <int NS>
__global__ void __launch_bounds__(kThreads) scanKernel(ScanKernelArgs k) {
    const ScanArgs& s = k.s;
    const int S = k.lanes;
    const int per_block = kThreads / S;
    const int64_t ch_blocks = (s.channels + per_block - 1) / per_block;
    const int64_t bid = blockIdx.x;
    const int chb = static_cast<int>(bid % ch_blocks);
    const int64_t rest = bid / ch_blocks;
    const int c = static_cast<int>(rest % k.chunks);
    const int b = static_cast<int>(rest / k.chunks);
    const int d_raw = chb * per_block + static_cast<int>(threadIdx.x) / S;
    const bool active = d_raw < s.channels;
    const int d = active ? d_raw : s.channels - 1;  // idle lanes still join the shuffles
    const int lane = threadIdx.x % S;
    const int N = s.d_state, E = s.channels;
    const int n0 = lane * NS;

    float a[NS], h[NS];
#pragma unroll
    for (int i = 0; i < NS; ++i) a[i] = n0 + i < N ? s.a[static_cast<int64_t>(d) * N + n0 + i] : 0.f;
    pdlWait();
    pdlLaunchDependents();

    float* hsrc;
    const int64_t ws_row = (static_cast<int64_t>(b) * k.chunks + c) * E + d;  // (b, c, d) in the workspace
    if (k.mode == kWhole) hsrc = s.h + b * s.h_stride + static_cast<int64_t>(d) * N;
    else hsrc = k.ws_h + ws_row * N;
#pragma unroll
    for (int i = 0; i < NS; ++i) h[i] = (k.mode != kChunkLocal && n0 + i < N) ? hsrc[n0 + i] : 0.f;

    const float dskip = s.d_skip[d];
    const int t0 = c * k.chunk;
    const int t1 = min(s.steps, t0 + k.chunk);
    float dsum = 0.f;
    for (int t = t0; t < t1; ++t) {
        const int64_t r = static_cast<int64_t>(b) * s.steps + t;
        const float delta = softplusf(s.dt[r * E + d]);
        const float u = s.u[r * E + d];
        const float du = delta * u;
        const float* Bt = s.bc + r * s.ldbc;
        const float* Ct = Bt + N;
        float acc = 0.f;
        if (k.mode == kChunkLocal) {
            dsum += delta;
#pragma unroll
            for (int i = 0; i < NS; ++i)
                if (n0 + i < N) h[i] = expf(delta * a[i]) * h[i] + du * Bt[n0 + i];
            continue;
        }
#pragma unroll
        for (int i = 0; i < NS; ++i) {
            if (n0 + i < N) {
                h[i] = expf(delta * a[i]) * h[i] + du * Bt[n0 + i];
                acc += h[i] * Ct[n0 + i];
            }
        }
        for (int off = S / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
        if (active && lane == 0) s.out[r * E + d] = (acc + dskip * u) * siluf(s.z[r * s.ldz + d]);
    }
    if (!active) return;
    if (k.mode == kWhole) {
#pragma unroll
        for (int i = 0; i < NS; ++i)
            if (n0 + i < N) hsrc[n0 + i] = h[i];
    } else if (k.mode == kChunkLocal) {
#pragma unroll
        for (int i = 0; i < NS; ++i)
            if (n0 + i < N) hsrc[n0 + i] = h[i];
        if (lane == 0) k.ws_sum[ws_row] = dsum;
    }
}

// Phase 2: one thread per (row, channel, state) walks the chunks in order.
__global__ void scanCombineKernel(ScanKernelArgs k) {
    pdlWait();
    pdlLaunchDependents();
    const ScanArgs& s = k.s;
    const int N = s.d_state, E = s.channels;
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= static_cast<int64_t>(s.batch) * E * N) return;
    const int n = static_cast<int>(i % N);
    const int d = static_cast<int>((i / N) % E);
    const int b = static_cast<int>(i / (static_cast<int64_t>(N) * E));
    float* hp = s.h + b * s.h_stride + static_cast<int64_t>(d) * N + n;
    const float a = s.a[static_cast<int64_t>(d) * N + n];
    float H = *hp;
    for (int c = 0; c < k.chunks; ++c) {
        const int64_t row = (static_cast<int64_t>(b) * k.chunks + c) * E + d;
        float* wp = k.ws_h + row * N + n;
        const float local = *wp;
        *wp = H;  // start state of chunk c
        H = expf(a * k.ws_sum[row]) * H + local;
    }
    *hp = H;
}

void lanesFor(int N, int* ns, int* lanes) {
    *ns = N <= 128 ? 4 : 8;
    const int need = (N + *ns - 1) / *ns;
    int S = 1;
    while (S < need) S *= 2;
    *lanes = S;
}

void launchScan(const Exec& ex, const ScanKernelArgs& k, int ns) {
    const int per_block = kThreads / k.lanes;
    const int64_t blocks = static_cast<int64_t>((k.s.channels + per_block - 1) / per_block) * k.chunks * k.s.batch;
    const char* name = k.mode == kWhole ? "selectiveScan" : k.mode == kChunkLocal ? "selectiveScan chunk states"
                                                                                  : "selectiveScan chunk outputs";
    if (ns == 4) launch(name, ex, scanKernel<4>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, k);
    else launch(name, ex, scanKernel<8>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, k);
}

}  // namespace

ScanPlan planScan(const Exec& ex, const ScanArgs& s, ScanAlgo algo, int chunk_override) {
    ScanPlan p;
    int ns, S;
    lanesFor(s.d_state, &ns, &S);
    const int64_t seq_threads = static_cast<int64_t>(s.batch) * s.channels * S;
    const int64_t fill = static_cast<int64_t>(ex.sms) * 2048;  // resident threads of the whole GPU
    p.chunked = algo == ScanAlgo::Chunked ||
                (algo == ScanAlgo::Auto && s.steps >= kScanChunkedMinSteps && seq_threads < fill);
    if (!p.chunked || s.steps < 2) {
        p.chunked = false;
        p.chunk = s.steps;
        return p;
    }
    int L;
    if (chunk_override > 0) {
        L = chunk_override;
    } else {
        // About two GPU-fulls of threads, chunks of at least 32 steps.
        const int64_t want = std::max<int64_t>(2, (2 * fill + seq_threads - 1) / seq_threads);
        const int64_t most = std::max<int64_t>(1, (s.steps + 31) / 32);
        const int64_t C = std::min(want, most);
        L = static_cast<int>((s.steps + C - 1) / C);
    }
    p.chunk = L;
    p.chunks = (s.steps + L - 1) / L;
    if (p.chunks < 2) {  // one chunk is just the sequential scan
        p.chunked = false;
        p.chunk = s.steps;
        p.chunks = 1;
        return p;
    }
    p.workspace_floats = static_cast<int64_t>(s.batch) * p.chunks * s.channels * (static_cast<int64_t>(s.d_state) + 1);
    return p;
}

void selectiveScan(const Exec& ex, const ScanArgs& s, const ScanPlan& plan, float* ws) {
    if (s.batch <= 0 || s.steps <= 0 || s.channels <= 0) return;
    if (s.d_state < 1 || s.d_state > 256)
        throw std::invalid_argument("selectiveScan: d_state " + std::to_string(s.d_state) + " is outside [1, 256]");
    int ns, S;
    lanesFor(s.d_state, &ns, &S);
    ScanKernelArgs k{s, S, s.steps, 1, kWhole, nullptr, nullptr};
    if (!plan.chunked) {
        launchScan(ex, k, ns);
        return;
    }
    k.chunk = plan.chunk;
    k.chunks = plan.chunks;
    k.ws_h = ws;
    k.ws_sum = ws + static_cast<int64_t>(s.batch) * plan.chunks * s.channels * s.d_state;
    k.mode = kChunkLocal;
    launchScan(ex, k, ns);
    const int64_t n = static_cast<int64_t>(s.batch) * s.channels * s.d_state;
    launch("selectiveScan combine", ex, scanCombineKernel, dim3(blocksFor(n, 256)), dim3(256), 0, k);
    k.mode = kChunkOutput;
    launchScan(ex, k, ns);
}

}  // namespace mamba::cuda
