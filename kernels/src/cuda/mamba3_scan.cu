// Mamba-3 SISO scan, forward: BCNorm, Δ/A/trapezoid, RoPE, the trapezoidal recurrence, D skip and the
// gate, step by step (the math: ops.h above Mamba3ScanArgs; the shared step: mamba3_step.cuh).
//
// One block per (row b, head h); the head's state S [headdim, d_state] is spread over the block's
// registers (layout: mamba3_step.cuh). Per step:
//  1. every warp computes the two BCNorm scales itself (a warp-wide sum over d_state: no barrier), and
//     every thread the head's scalars Δ, A, σ, α, β, γ;
//  2. thread m builds pair m of k and q (bias, rotation; it alone keeps pair m's angle) into shared
//     memory, double-buffered by step parity so one barrier per step suffices;
//  3. after the barrier each thread updates its S elements and its share of y = S·q, summed over the row
//     group's lanes by a xor tree; k_prev and v_prev stay in the registers of the threads that use them.
// The gate norm needs Σ_p y² over the head: per-warp partials, a second barrier, then a fixed-order sum.
//
// Decode (T = 1) and training (checkpoints) both use this kernel; with checkpoints the whole head state
// (S, k_prev, v_prev, θ) is stored before steps 0, chunk, 2·chunk, … for mamba3_scan_backward.cu.
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
__global__ void __launch_bounds__(kMamba3MaxThreads) mamba3ForwardKernel(Mamba3ScanArgs s, Mamba3Offsets o, Layout lay, Checkpointing ck) {
    extern __shared__ float sm[];
    const int N = s.d_state, P = s.headdim, H = s.nheads, NA = s.nangles;
    const int h = static_cast<int>(blockIdx.x % H), b = static_cast<int>(blockIdx.x / H);
    const int grp = h / (H / s.ngroups);
    const int tid = threadIdx.x, warp = tid >> 5, L = lay.L, G = lay.G;
    const int lane = tid % L, rg = tid / L;
    const int pairs = (N + 1) / 2;
    float* kq = sm;               // [2][2N]: k then q, by step parity
    float* theta = sm + 4 * N;    // [NA]: entry m used by the thread owning pair m only
    float* red = theta + NA;      // [2][32]: per-warp partials of the gate norm

    pdlWait();
    pdlLaunchDependents();
    float* st = s.state + b * s.state_stride;
    float* Sg = st + static_cast<int64_t>(h) * P * N;
    float* kg = st + o.k + static_cast<int64_t>(h) * N;
    float* vg = st + o.v + static_cast<int64_t>(h) * P;
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
    for (int t = 0; t < s.steps; ++t) {
        const int64_t r = r0 + t;
        const float* row = s.proj + r * s.ldproj;
        if (ck.data && t % ck.chunk == 0) {  // the head's state before step t
            float* c = ck.data + (static_cast<int64_t>(b) * ck.chunks + t / ck.chunk) * o.state;
            float* cS = c + static_cast<int64_t>(h) * P * N;
#pragma unroll
            for (int j = 0; j < RP; ++j) {
                const int p = rg + G * j;
                if (p >= P) continue;
                if (lane == 0) c[o.v + static_cast<int64_t>(h) * P + p] = vp[j];
#pragma unroll
                for (int i = 0; i < NS; ++i)
                    if (lane + L * i < N) cS[static_cast<int64_t>(p) * N + lane + L * i] = S[j][i];
            }
            if (rg == 0)
#pragma unroll
                for (int i = 0; i < NS; ++i)
                    if (lane + L * i < N) c[o.k + static_cast<int64_t>(h) * N + lane + L * i] = kp[i];
            for (int m = tid; m < NA; m += lay.threads) c[o.theta + static_cast<int64_t>(h) * NA + m] = theta[m];
        }
        const m3::Coeffs cf = m3::coeffs(s, o, row, h);
        const float* Braw = row + o.b + static_cast<int64_t>(grp) * N;
        const float* Craw = row + o.c + static_cast<int64_t>(grp) * N;
        const float rsB = m3::rmsInv(Braw, N), rsC = m3::rmsInv(Craw, N);
        float* kqb = kq + (t & 1) * 2 * N;
        for (int m = tid; m < pairs; m += lay.threads) {
            float th = m < NA ? theta[m] : 0.f;
            const m3::PairStep ps = m3::buildPair(s, Braw, Craw, rsB, rsC, h, m, cf.delta, row + o.angle, th);
            if (m < NA) theta[m] = th;
            kqb[2 * m] = ps.k0;
            kqb[N + 2 * m] = ps.q0;
            if (2 * m + 1 < N) {
                kqb[2 * m + 1] = ps.k1;
                kqb[N + 2 * m + 1] = ps.q1;
            }
        }
        float x[RP], z[RP];
#pragma unroll
        for (int j = 0; j < RP; ++j) {
            const int p = rg + G * j;
            x[j] = p < P ? row[o.x + h * P + p] : 0.f;
            z[j] = p < P ? row[o.z + h * P + p] : 0.f;
        }
        __syncthreads();
        float kn[NS], qn[NS];
#pragma unroll
        for (int i = 0; i < NS; ++i) {
            const int n = lane + L * i;
            kn[i] = n < N ? kqb[n] : 0.f;
            qn[i] = n < N ? kqb[N + n] : 0.f;
        }
        float y[RP];
#pragma unroll
        for (int j = 0; j < RP; ++j) {
            const float bv = __fmul_rn(cf.beta, vp[j]), gx = __fmul_rn(cf.gamma, x[j]);
            float acc = 0.f;
#pragma unroll
            for (int i = 0; i < NS; ++i) {
                S[j][i] = m3::stateUpdate(S[j][i], cf.alpha, bv, kp[i], gx, kn[i]);
                acc = fmaf(S[j][i], qn[i], acc);
            }
            y[j] = fmaf(dskip, x[j], m3::groupSum(acc, L));
            vp[j] = x[j];
        }
#pragma unroll
        for (int i = 0; i < NS; ++i) kp[i] = kn[i];

        float* out = s.out + r * s.ldout + static_cast<int64_t>(h) * P;
        if (!s.gate_norm) {
#pragma unroll
            for (int j = 0; j < RP; ++j) {
                const int p = rg + G * j;
                if (lane == 0 && p < P) out[p] = y[j] * siluf(z[j]);
            }
        } else {
            float part = 0.f;
#pragma unroll
            for (int j = 0; j < RP; ++j)
                if (lane == 0 && rg + G * j < P) part = fmaf(y[j], y[j], part);
            part = m3::warpSum(part);
            float* rb = red + (t & 1) * 32;
            if ((tid & 31) == 0) rb[warp] = part;
            __syncthreads();
            float tot = 0.f;
            for (int w = 0; w < lay.threads / 32; ++w) tot += rb[w];
            const float rho = 1.f / sqrtf(tot / static_cast<float>(P) + m3::kEps);
#pragma unroll
            for (int j = 0; j < RP; ++j) {
                const int p = rg + G * j;
                if (lane == 0 && p < P) out[p] = __fmul_rn(s.gate_norm[h * P + p], __fmul_rn(y[j], rho)) * siluf(z[j]);
            }
        }
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
              const Checkpointing& ck) {
    const dim3 block(lay.threads);
    const char* name = ck.data ? "mamba3Scan (checkpoints)" : "mamba3Scan";
    switch (rp) {
        case 1: launch(name, ex, mamba3ForwardKernel<NS, 1>, grid, block, smem, s, Mamba3Offsets::of(s), lay, ck); break;
        case 2: launch(name, ex, mamba3ForwardKernel<NS, 2>, grid, block, smem, s, Mamba3Offsets::of(s), lay, ck); break;
        case 4: launch(name, ex, mamba3ForwardKernel<NS, 4>, grid, block, smem, s, Mamba3Offsets::of(s), lay, ck); break;
        case 8: launch(name, ex, mamba3ForwardKernel<NS, 8>, grid, block, smem, s, Mamba3Offsets::of(s), lay, ck); break;
        default:
            if constexpr (NS < 8) launch(name, ex, mamba3ForwardKernel<NS, 16>, grid, block, smem, s, Mamba3Offsets::of(s), lay, ck);
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
    Checkpointing c{nullptr, 1, 1};
    if (ck) {
        if (ck->chunk < 1) fail("mamba3Scan: checkpoint chunk = " + std::to_string(ck->chunk) + " must be ≥ 1");
        if (!ck->data) fail("mamba3Scan: null checkpoint buffer");
        c = Checkpointing{ck->data, ck->chunk, (s.steps + ck->chunk - 1) / ck->chunk};
    }
    const int64_t blocks = static_cast<int64_t>(s.batch) * s.nheads;
    if (blocks > 0x7fffffff) fail("mamba3Scan: batch·nheads = " + std::to_string(blocks) + " is too large for one launch");
    const Mamba3Shape sh = mamba3Shape(s.headdim, s.d_state, kMamba3ForwardPerThread);
    const size_t smem = (4 * static_cast<size_t>(s.d_state) + s.nangles + 64) * sizeof(float);
    const dim3 grid(static_cast<unsigned>(blocks));
    switch (sh.ns) {
        case 1: launchRp<1>(sh.rp, ex, grid, sh.lay, smem, s, c); break;
        case 2: launchRp<2>(sh.rp, ex, grid, sh.lay, smem, s, c); break;
        case 4: launchRp<4>(sh.rp, ex, grid, sh.lay, smem, s, c); break;
        default: launchRp<8>(sh.rp, ex, grid, sh.lay, smem, s, c); break;
    }
}

void CudaBackend::mamba3Scan(const Mamba3ScanArgs& s, const ScanCheckpoints* checkpoints) {
    Lock lock(mu_);
    validateMamba3(s, "mamba3Scan", true);
    enter();
    cuda::mamba3Scan(nextExec(), s, checkpoints);
}

}  // namespace mamba::cuda
