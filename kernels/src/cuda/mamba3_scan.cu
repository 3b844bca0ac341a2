// Mamba-3 SISO scan, forward: BCNorm, Δ/A/trapezoid, RoPE, the trapezoidal recurrence, D skip and the
// gate (the math: ops.h above Mamba3ScanArgs; the shared pieces: mamba3_step.cuh).
//
// One block per (row b, head h); the head's state S [headdim, d_state] is spread over the block's
// registers (layout: mamba3_step.cuh). Steps go in tiles of up to kMamba3TileSteps:
//  1. the whole block prepares the tile's state-independent inputs in shared memory (prepareTile: the
//     scalars Δ, α, β, γ, the BCNorm scales, the angle chains, the rotated k and q, x and z);
//  2. then each step, with no barrier: every thread updates its S elements and its share of y = S·q,
//     summed over its row group's lanes by a xor tree; k_prev and v_prev stay in registers.
// The gate norm needs Σ_p y² over the head per step: after the tile, a warp per step, then the gated outputs.
//
// Decode (T = 1) and short calls use this kernel; calls of kMamba3ChunkedMinSteps steps or more take the
// chunked form (mamba3_chunked.cu) when it can run them. With checkpoints the whole head state (S, k_prev,
// v_prev, θ) is stored before steps 0, chunk, 2·chunk, … for mamba3_scan_backward.cu (the chunked form does
// the same when chunk = kMamba3Chunk; otherwise this kernel runs).
#include "cuda_backend.h"
#include "mamba3_step.cuh"

#include <string>

namespace mamba::cuda {
namespace {

using m3::Layout;

struct Checkpointing {
    float* data;  // null: none
    int chunk, chunks;
};

template <int NS, int RP>
__global__ void __launch_bounds__(kMamba3MaxThreads)
    mamba3ForwardKernel(Mamba3ScanArgs s, Mamba3Offsets o, Layout lay, Checkpointing ck, int TS) {
    extern __shared__ float sm[];
    const int N = s.d_state, P = s.headdim, H = s.nheads, NA = s.nangles;
    const int h = static_cast<int>(blockIdx.x % H), b = static_cast<int>(blockIdx.x / H);
    const int grp = h / (H / s.ngroups);
    const int tid = threadIdx.x, warp = tid >> 5, W = lay.threads >> 5, L = lay.L, G = lay.G;
    const int lane = tid % L, rg = tid / L;
    const int64_t hP = static_cast<int64_t>(h) * P;
    float* theta = sm;  // [NA]: the angles before the tile; entry m used by thread m mod threads only
    const m3::Tile tl = m3::carveTile(sm + NA, TS, N, NA, P, 2);

    pdlWait();
    pdlLaunchDependents();
    float* st = s.state + b * s.state_stride;
    float* Sg = st + hP * N;
    float* kg = st + o.k + static_cast<int64_t>(h) * N;
    float* vg = st + o.v + hP;
    float* thg = st + o.theta + static_cast<int64_t>(h) * NA;

    float S[RP][NS], kp[NS], vp[RP];
#pragma unroll
    for (int j = 0; j < RP; ++j) {
        const int p = rg + G * j;
        vp[j] = p < P ? vg[p] : 0.f;
#pragma unroll
        for (int i = 0; i < NS; ++i) {
            const int n = lane + L * i;
            S[j][i] = (p < P && n < N) ? Sg[static_cast<int64_t>(p) * N + n] : 0.f;
        }
    }
#pragma unroll
    for (int i = 0; i < NS; ++i) kp[i] = lane + L * i < N ? kg[lane + L * i] : 0.f;
    for (int m = tid; m < NA; m += lay.threads) theta[m] = thg[m];

    const float dskip = s.d_skip[h];
    const int64_t r0 = static_cast<int64_t>(b) * s.steps;
    for (int t0 = 0; t0 < s.steps; t0 += TS) {
        const int cnt = min(TS, s.steps - t0);
        __syncthreads();  // the previous tile's buffers have been read
        m3::prepareTile(s, o, tl, r0 + t0, cnt, h, grp, theta, lay.threads, 2, nullptr, 0, nullptr, 0);
        for (int si = 0; si < cnt; ++si) {
            const int t = t0 + si;
            const int64_t r = r0 + t;
            if (ck.data && t % ck.chunk == 0) {  // the head's state before step t
                float* c = ck.data + (static_cast<int64_t>(b) * ck.chunks + t / ck.chunk) * o.state;
                float* cS = c + hP * N;
#pragma unroll
                for (int j = 0; j < RP; ++j) {
                    const int p = rg + G * j;
                    if (p >= P) continue;
                    if (lane == 0) c[o.v + hP + p] = vp[j];
#pragma unroll
                    for (int i = 0; i < NS; ++i)
                        if (lane + L * i < N) cS[static_cast<int64_t>(p) * N + lane + L * i] = S[j][i];
                }
                if (rg == 0)
#pragma unroll
                    for (int i = 0; i < NS; ++i)
                        if (lane + L * i < N) c[o.k + static_cast<int64_t>(h) * N + lane + L * i] = kp[i];
                for (int m = tid; m < NA; m += lay.threads)
                    c[o.theta + static_cast<int64_t>(h) * NA + m] = si == 0 ? theta[m] : tl.th[(si - 1) * NA + m];
            }
            const float* cf = tl.coef + si * m3::kCoef;
            const float alpha = cf[1], beta = cf[2], gamma = cf[3];
            const float* kq = tl.kq + si * 2 * N;
            const float* xz = tl.xz + si * 2 * P;
            float kn[NS], qn[NS];
#pragma unroll
            for (int i = 0; i < NS; ++i) {
                const int n = lane + L * i;
                kn[i] = n < N ? kq[n] : 0.f;
                qn[i] = n < N ? kq[N + n] : 0.f;
            }
            float* out = s.out + r * s.ldout + hP;
#pragma unroll
            for (int j = 0; j < RP; ++j) {
                const int p = rg + G * j;
                const float x = p < P ? xz[p] : 0.f;
                const float bv = __fmul_rn(beta, vp[j]), gx = __fmul_rn(gamma, x);
                float acc = 0.f;
#pragma unroll
                for (int i = 0; i < NS; ++i) {
                    S[j][i] = m3::stateUpdate(S[j][i], alpha, bv, kp[i], gx, kn[i]);
                    acc = fmaf(S[j][i], qn[i], acc);
                }
                const float y = fmaf(dskip, x, m3::groupSum(acc, L));
                vp[j] = x;
                if (lane == 0 && p < P) {
                    if (s.gate_norm) tl.y[si * P + p] = y;
                    else out[p] = y * siluf(xz[P + p]);
                }
            }
#pragma unroll
            for (int i = 0; i < NS; ++i) kp[i] = kn[i];
        }
        if (s.gate_norm) {  // per step: ρ = 1/sqrt(mean_p y² + eps) (a warp each), then the gated outputs
            __syncthreads();
            for (int si = warp; si < cnt; si += W) {
                float yy = 0.f;
                for (int p = tid & 31; p < P; p += 32) yy = fmaf(tl.y[si * P + p], tl.y[si * P + p], yy);
                yy = m3::warpSum(yy);
                if ((tid & 31) == 0) tl.red[si] = 1.f / sqrtf(yy / static_cast<float>(P) + m3::kEps);
            }
            __syncthreads();
            for (int idx = tid; idx < cnt * P; idx += lay.threads) {
                const int si = idx / P, p = idx - si * P;
                const float y = tl.y[idx], z = tl.xz[si * 2 * P + P + p];
                s.out[(r0 + t0 + si) * s.ldout + hP + p] = __fmul_rn(s.gate_norm[hP + p], __fmul_rn(y, tl.red[si])) * siluf(z);
            }
        }
        for (int m = tid; m < NA; m += lay.threads) theta[m] = tl.th[(cnt - 1) * NA + m];
    }
    // the state after the last step
#pragma unroll
    for (int j = 0; j < RP; ++j) {
        const int p = rg + G * j;
        if (p >= P) continue;
        if (lane == 0) vg[p] = vp[j];
#pragma unroll
        for (int i = 0; i < NS; ++i)
            if (lane + L * i < N) Sg[static_cast<int64_t>(p) * N + lane + L * i] = S[j][i];
    }
    if (rg == 0)
#pragma unroll
        for (int i = 0; i < NS; ++i)
            if (lane + L * i < N) kg[lane + L * i] = kp[i];
    for (int m = tid; m < NA; m += lay.threads) thg[m] = theta[m];
}

template <int NS>
void launchRp(int rp, const Exec& ex, dim3 grid, const Layout& lay, size_t smem, const Mamba3ScanArgs& s,
              const Checkpointing& ck, int ts) {
    const dim3 block(lay.threads);
    const char* name = ck.data ? "mamba3Scan (checkpoints)" : "mamba3Scan";
    switch (rp) {
        case 1: launch(name, ex, mamba3ForwardKernel<NS, 1>, grid, block, smem, s, Mamba3Offsets::of(s), lay, ck, ts); break;
        case 2: launch(name, ex, mamba3ForwardKernel<NS, 2>, grid, block, smem, s, Mamba3Offsets::of(s), lay, ck, ts); break;
        case 4: launch(name, ex, mamba3ForwardKernel<NS, 4>, grid, block, smem, s, Mamba3Offsets::of(s), lay, ck, ts); break;
        case 8: launch(name, ex, mamba3ForwardKernel<NS, 8>, grid, block, smem, s, Mamba3Offsets::of(s), lay, ck, ts); break;
        default:
            if constexpr (NS < 8) launch(name, ex, mamba3ForwardKernel<NS, 16>, grid, block, smem, s, Mamba3Offsets::of(s), lay, ck, ts);
            break;
    }
}

}  // namespace

Mamba3Shape mamba3Shape(int headdim, int d_state, int per_thread) {
    Mamba3Shape sh;
    int L = 1;
    while (L < d_state && L < 32) L *= 2;
    sh.ns = 1;
    while (sh.ns * L < d_state) sh.ns *= 2;  // ≤ 8 for d_state ≤ 256
    int rp = per_thread / sh.ns;
    rp = rp < 1 ? 1 : rp > 16 ? 16 : rp;
    while (rp > 1 && rp / 2 >= headdim) rp /= 2;  // no register rows that no thread could use
    // At most kMamba3MaxThreads threads (16 rows with d_state ≤ 128, 8 above: headdim·d_state ≤ 16384).
    while (rp < 16 && (headdim + rp - 1) / rp * L > kMamba3MaxThreads) rp *= 2;
    const int groups = (headdim + rp - 1) / rp;
    sh.lay.L = L;
    sh.lay.threads = (groups * L + 31) / 32 * 32;
    sh.lay.G = sh.lay.threads / L;
    sh.rp = rp;
    return sh;
}

int mamba3TileSteps(const Mamba3ScanArgs& s, int xzw, int64_t floats) {
    int ts = kMamba3TileSteps;
    while (ts > 1 && m3::tileFloats(ts, s.d_state, s.nangles, s.headdim, xzw) > floats) --ts;
    return s.steps < ts ? s.steps : ts;
}

void validateMamba3(const Mamba3ScanArgs& s, const char* op, bool forward) {
    const std::string o(op);
    if (s.batch < 0 || s.steps < 0) fail(o + ": batch = " + std::to_string(s.batch) + " and steps = " + std::to_string(s.steps) + " must be ≥ 0");
    if (s.nheads < 1) fail(o + ": nheads = " + std::to_string(s.nheads) + " must be ≥ 1");
    if (s.headdim < 1 || s.headdim > 256) fail(o + ": headdim = " + std::to_string(s.headdim) + " must be in [1, 256]");
    if (s.d_state < 1 || s.d_state > 256) fail(o + ": d_state = " + std::to_string(s.d_state) + " must be in [1, 256]");
    if (static_cast<int64_t>(s.headdim) * s.d_state > kMamba3MaxHeadState)
        fail(o + ": headdim·d_state = " + std::to_string(static_cast<int64_t>(s.headdim) * s.d_state) +
             " exceeds " + std::to_string(kMamba3MaxHeadState) + " (one head's state is held by one thread block)");
    if (s.ngroups < 1 || s.nheads % s.ngroups != 0)
        fail(o + ": ngroups = " + std::to_string(s.ngroups) + " must be ≥ 1 and divide nheads = " + std::to_string(s.nheads));
    if (s.nangles < 0 || 2 * s.nangles > s.d_state)
        fail(o + ": nangles = " + std::to_string(s.nangles) + " must be in [0, d_state/2 = " + std::to_string(s.d_state / 2) + "]");
    if (!(s.a_floor >= 0.f)) fail(o + ": a_floor = " + std::to_string(s.a_floor) + " must be ≥ 0");
    if (s.ldproj < s.projWidth())
        fail(o + ": ldproj = " + std::to_string(s.ldproj) + " is less than the in_proj width " + std::to_string(s.projWidth()));
    if (!s.proj || !s.dt_bias || !s.b_bias || !s.c_bias || !s.b_norm || !s.c_norm || !s.d_skip)
        fail(o + ": a null input (proj, dt_bias, b_bias, c_bias, b_norm, c_norm or d_skip)");
    if (!forward) return;
    if (s.ldout < s.dInner()) fail(o + ": ldout = " + std::to_string(s.ldout) + " is less than nheads·headdim = " + std::to_string(s.dInner()));
    if (s.state_stride < s.stateSize() && s.batch > 1)
        fail(o + ": state_stride = " + std::to_string(s.state_stride) + " is less than the row state " + std::to_string(s.stateSize()));
    if (!s.state || !s.out) fail(o + ": null state or out");
}

void mamba3Scan(const Exec& ex, const Mamba3ScanArgs& s, const ScanCheckpoints* ck) {
    if (s.batch == 0 || s.steps == 0) return;
    if (s.steps == 1 && !ck && mamba3Decode(ex, s)) return;  // decode: mamba3_decode.cu
    Checkpointing c{nullptr, 1, 1};
    if (ck) {
        if (ck->chunk < 1) fail("mamba3Scan: checkpoint chunk = " + std::to_string(ck->chunk) + " must be ≥ 1");
        if (!ck->data) fail("mamba3Scan: null checkpoint buffer");
        c = Checkpointing{ck->data, ck->chunk, (s.steps + ck->chunk - 1) / ck->chunk};
    }
    const int64_t blocks = static_cast<int64_t>(s.batch) * s.nheads;
    if (blocks > 0x7fffffff) fail("mamba3Scan: batch·nheads = " + std::to_string(blocks) + " is too large for one launch");
    const Mamba3Shape sh = mamba3Shape(s.headdim, s.d_state, kMamba3ForwardPerThread);
    const int ts = mamba3TileSteps(s, 2, kMamba3TileSmem / sizeof(float) - s.nangles);
    const size_t smem = (s.nangles + m3::tileFloats(ts, s.d_state, s.nangles, s.headdim, 2)) * sizeof(float);
    const dim3 grid(static_cast<unsigned>(blocks));
    switch (sh.ns) {
        case 1: launchRp<1>(sh.rp, ex, grid, sh.lay, smem, s, c, ts); break;
        case 2: launchRp<2>(sh.rp, ex, grid, sh.lay, smem, s, c, ts); break;
        case 4: launchRp<4>(sh.rp, ex, grid, sh.lay, smem, s, c, ts); break;
        default: launchRp<8>(sh.rp, ex, grid, sh.lay, smem, s, c, ts); break;
    }
}

void CudaBackend::mamba3Scan(const Mamba3ScanArgs& s, const ScanCheckpoints* checkpoints) {
    Lock lock(mu_);
    validateMamba3(s, "mamba3Scan", true);
    enter();
    const Exec e = nextExec();
    // Long calls take the chunked form (mamba3_chunked.cu) when its workspace is there or can be allocated
    // (never inside a capture); setScanAlgo(Sequential) keeps the step kernel (tests, A/B timing).
    if (scan_algo_ != ScanAlgo::Sequential && s.batch > 0 && (!checkpoints || checkpoints->data) &&
        mamba3ChunkedUsable(e, s, checkpoints)) {
        const int64_t need = mamba3ChunkedWorkspace(s);
        if (need > scan_ws_floats_ && !capturing_) {
            float* bigger = static_cast<float*>(deviceMalloc(static_cast<size_t>(need) * sizeof(float), "scan workspace"));
            if (scan_ws_) {
                if (live_graphs_ > 0) retired_.push_back(scan_ws_);  // a live graph may still use it
                else freeNow(scan_ws_);
            }
            scan_ws_ = bigger;
            scan_ws_floats_ = need;
        }
        if (need <= scan_ws_floats_) {
            cuda::mamba3ScanChunked(e, s, checkpoints, scan_ws_);
            return;
        }
    }
    cuda::mamba3Scan(e, s, checkpoints);
}

}  // namespace mamba::cuda
