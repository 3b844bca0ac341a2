// Mamba-3 SISO scan, one step (T = 1, no checkpoints, no gate norm): the decode path of mamba3Scan.
//
// A decode step reads and rewrites every (row, head) state once and does a few flops per element, so it
// should run at the rate memory moves S. The sequential kernel (mamba3_scan.cu) holds a whole head in one
// 512-thread block with 128 registers and prepares a tile of steps behind three barriers: at T = 1 that is
// latency on a handful of blocks. Here:
//  * grid: (row b, head h, slice of headdim rows); the slices of one head form a thread-block cluster
//    (Hopper) so that several SMs stream one head at B = 1; without clusters (sm_80) one slice per head;
//  * each thread owns V consecutive states (float4 when d_state % 4 == 0 and S is 16-byte aligned) of
//    RPT rows per pass; Ln lanes (a power of two ≤ 32) cover one row, so a row's y = S·q is a xor tree
//    inside a warp (fixed order, no atomics);
//  * every block builds the step's k, q (and reads k_prev) into shared memory with the same functions as
//    the sequential kernel (mamba3_step.cuh), so S after the step is bit for bit the sequential kernel's;
//    y differs from it only in the order of the sum over d_state;
//  * k_prev and θ are shared by the whole head: every slice reads the old values, then only slice 0
//    writes the new ones, after a cluster barrier (arrive once read, wait before writing);
//  * v_prev[p] is written by the block that owns row p.
// Capture-safe: no allocation, no synchronisation with the host.
#include "cuda_backend.h"
#include "mamba3_step.cuh"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace mamba::cuda {
namespace {

constexpr int kDecodeMaxThreads = 256;
constexpr int kDecodeRowsPerThread = 2;  // rows per thread per pass (RPT)
constexpr int kDecodeMaxSlices = 8;      // the portable cluster size
constexpr int kDecodeMaxN = 256;
constexpr int kDecodeMaxAngles = kDecodeMaxN / 2;

__device__ __forceinline__ void clusterArrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void clusterWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

template <int V>
__device__ __forceinline__ void loadV(const float* p, float (&v)[V]) {
    if constexpr (V == 4) {
        const float4 t = *reinterpret_cast<const float4*>(p);
        v[0] = t.x;
        v[1] = t.y;
        v[2] = t.z;
        v[3] = t.w;
    } else {
#pragma unroll
        for (int e = 0; e < V; ++e) v[e] = p[e];
    }
}
template <int V>
__device__ __forceinline__ void storeV(float* p, const float (&v)[V]) {
    if constexpr (V == 4) {
        *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
#pragma unroll
        for (int e = 0; e < V; ++e) p[e] = v[e];
    }
}

/** The registers of one pass: RPT rows × NS chunks of V states, and the rows' x, z, v_prev. */
template <int V, int NS, int RPT>
struct Batch {
    float S[RPT][NS][V];
    float x[RPT], z[RPT], vp[RPT];
};

/** The raw inputs of pair m (n0 = 2m, n1 = 2m + 1; n1 ≥ N reads nothing): loaded before they are needed. */
struct PairIn {
    float b0, b1, c0, c1, wb0, wb1, wc0, wc1, bb0, bb1, cb0, cb1, th, ang;
};

__device__ __forceinline__ PairIn loadPair(const Mamba3ScanArgs& s, const float* Braw, const float* Craw, const float* thg,
                                           const float* angles, int h, int m) {
    const int N = s.d_state, n0 = 2 * m, n1 = 2 * m + 1;
    const float* bb = s.b_bias + static_cast<int64_t>(h) * N;
    const float* cb = s.c_bias + static_cast<int64_t>(h) * N;
    PairIn in;
    in.b0 = Braw[n0];
    in.c0 = Craw[n0];
    in.wb0 = s.b_norm[n0];
    in.wc0 = s.c_norm[n0];
    in.bb0 = bb[n0];
    in.cb0 = cb[n0];
    const bool two = n1 < N;
    in.b1 = two ? Braw[n1] : 0.f;
    in.c1 = two ? Craw[n1] : 0.f;
    in.wb1 = two ? s.b_norm[n1] : 0.f;
    in.wc1 = two ? s.c_norm[n1] : 0.f;
    in.bb1 = two ? bb[n1] : 0.f;
    in.cb1 = two ? cb[n1] : 0.f;
    const bool rot = m < s.nangles;
    in.th = rot ? thg[m] : 0.f;
    in.ang = rot ? angles[m] : 0.f;
    return in;
}

/**
 * k and q of pair m from its loaded inputs: m3::buildPair's arithmetic, operation for operation (normBias,
 * the angle update, cosf/sinf, rotate), so the results are its bits. Writes θ after the step to thsm.
 */
__device__ __forceinline__ void finishPair(const PairIn& in, int N, int NA, int m, float rsB, float rsC, float delta,
                                           float* ksm, float* qsm, float* thsm) {
    const int n0 = 2 * m, n1 = 2 * m + 1;
    const float kp0 = m3::normBias(in.b0, rsB, in.wb0, in.bb0);
    const float qp0 = m3::normBias(in.c0, rsC, in.wc0, in.cb0);
    const float kp1 = n1 < N ? m3::normBias(in.b1, rsB, in.wb1, in.bb1) : 0.f;
    const float qp1 = n1 < N ? m3::normBias(in.c1, rsC, in.wc1, in.cb1) : 0.f;
    float k0 = kp0, k1 = kp1, q0 = qp0, q1 = qp1;
    if (m < NA) {
        const float th = m3::advanceAngle(in.th, m3::angleStep(in.ang, delta));
        thsm[m] = th;
        const float c = cosf(th), sn = sinf(th);
        m3::rotate(c, sn, kp0, kp1, k0, k1);
        m3::rotate(c, sn, qp0, qp1, q0, q1);
    }
    ksm[n0] = k0;
    qsm[n0] = q0;
    if (n1 < N) {
        ksm[n1] = k1;
        qsm[n1] = q1;
    }
}

/**
 * One step of rows [p0, p1) of head h of row b: block (b·H + h)·slices + slice. Ln lanes per row,
 * rows p = base + rr + RPP·j (rr = tid / Ln, RPP = threads / Ln, j < RPT) for base = p0, p0 + RPP·RPT, …
 */
template <int V, int NS, int RPT>
__global__ void __launch_bounds__(kDecodeMaxThreads, 4)  // ≤ 64 registers: occupancy
    mamba3DecodeKernel(Mamba3ScanArgs s, Mamba3Offsets o, int Ln, int rows, int slices) {
    __shared__ float ksm[kDecodeMaxN], qsm[kDecodeMaxN], kpsm[kDecodeMaxN], thsm[kDecodeMaxAngles];
    __shared__ float sc[6];  // α, β, γ, Δ, 1/rms(B), 1/rms(C)
    const int N = s.d_state, P = s.headdim, H = s.nheads, NA = s.nangles;
    const int slice = static_cast<int>(blockIdx.x % static_cast<unsigned>(slices));
    const int task = static_cast<int>(blockIdx.x / static_cast<unsigned>(slices));
    const int h = task % H, b = task / H;
    const int grp = h / (H / s.ngroups);
    const int tid = threadIdx.x, threads = blockDim.x, warp = tid >> 5, W = threads >> 5;
    const int lane = tid & (Ln - 1), rr = tid / Ln, RPP = threads / Ln, pass = RPP * RPT;
    const int p0 = slice * rows, p1 = min(P, p0 + rows);
    const int64_t hP = static_cast<int64_t>(h) * P;

    pdlWait();
    pdlLaunchDependents();
    const float* row = s.proj + static_cast<int64_t>(b) * s.ldproj;  // steps == 1: proj row b
    float* st = s.state + static_cast<int64_t>(b) * s.state_stride;
    float* Sg = st + hP * N;
    float* kg = st + o.k + static_cast<int64_t>(h) * N;
    float* vg = st + o.v + hP;
    float* thg = st + o.theta + static_cast<int64_t>(h) * NA;
    float* out = s.out + static_cast<int64_t>(b) * s.ldout + hP;

    auto load = [&](int base, Batch<V, NS, RPT>& bt) {
#pragma unroll
        for (int j = 0; j < RPT; ++j) {
            const int p = base + rr + RPP * j;
            const bool ok = p < p1;
            bt.x[j] = ok ? row[o.x + hP + p] : 0.f;
            bt.z[j] = ok ? row[o.z + hP + p] : 0.f;
            bt.vp[j] = ok ? vg[p] : 0.f;
#pragma unroll
            for (int i = 0; i < NS; ++i) {
                const int n = V * (lane + Ln * i);
                if (ok && n < N) {
                    loadV<V>(Sg + static_cast<int64_t>(p) * N + n, bt.S[j][i]);
                } else {
#pragma unroll
                    for (int e = 0; e < V; ++e) bt.S[j][i][e] = 0.f;
                }
            }
        }
    };

    // 1. the first pass's S, x, z, v_prev in flight while the step's scalars, k and q are prepared
    Batch<V, NS, RPT> cur;
    load(p0, cur);
    const float* Braw = row + o.b + static_cast<int64_t>(grp) * N;
    const float* Craw = row + o.c + static_cast<int64_t>(grp) * N;
    const int pairs = (N + 1) / 2;
    PairIn first{};  // the inputs of pair tid, in flight with the reductions below
    if (tid < pairs) first = loadPair(s, Braw, Craw, thg, row + o.angle, h, tid);
    if (warp == 0) {
        const float r = m3::rmsInv(Braw, N);
        if (tid == 0) {
            const m3::Coeffs c = m3::coeffs(s, o, row, h);
            sc[0] = c.alpha;
            sc[1] = c.beta;
            sc[2] = c.gamma;
            sc[3] = c.delta;
            sc[4] = r;
        }
    }
    if (warp == W - 1) {
        const float r = m3::rmsInv(Craw, N);
        if ((tid & 31) == 0) sc[5] = r;
    }
    for (int n = tid; n < N; n += threads) kpsm[n] = kg[n];
    __syncthreads();
    const float delta = sc[3];
    for (int m = tid; m < pairs; m += threads) {
        const PairIn in = m == tid ? first : loadPair(s, Braw, Craw, thg, row + o.angle, h, m);
        finishPair(in, N, NA, m, sc[4], sc[5], delta, ksm, qsm, thsm);
    }
    __syncthreads();
    // every read of the head's k_prev and θ is done: slice 0 may overwrite them once all slices arrived
    if (slices > 1) clusterArrive();

    const float alpha = sc[0], beta = sc[1], gamma = sc[2], dskip = s.d_skip[h];
    float kn[NS][V], kp[NS][V], qn[NS][V];
#pragma unroll
    for (int i = 0; i < NS; ++i) {
        const int n = V * (lane + Ln * i);
#pragma unroll
        for (int e = 0; e < V; ++e) {
            const bool ok = n + e < N;
            kn[i][e] = ok ? ksm[n + e] : 0.f;
            kp[i][e] = ok ? kpsm[n + e] : 0.f;
            qn[i][e] = ok ? qsm[n + e] : 0.f;
        }
    }

    // 2. the passes: S ← α·S + β·v_prev·k_prev + γ·x·k, y = S·q + D·x, out = y·SiLU(z)
    for (int base = p0; base < p1; base += pass) {
        const bool more = base + pass < p1;  // uniform over the block
        Batch<V, NS, RPT> nxt;
        if (more) load(base + pass, nxt);
#pragma unroll
        for (int j = 0; j < RPT; ++j) {
            const int p = base + rr + RPP * j;
            const bool ok = p < p1;
            const float bv = __fmul_rn(beta, cur.vp[j]), gx = __fmul_rn(gamma, cur.x[j]);
            float acc = 0.f;
#pragma unroll
            for (int i = 0; i < NS; ++i)
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    cur.S[j][i][e] = m3::stateUpdate(cur.S[j][i][e], alpha, bv, kp[i][e], gx, kn[i][e]);
                    acc = fmaf(cur.S[j][i][e], qn[i][e], acc);
                }
            const float y = fmaf(dskip, cur.x[j], m3::groupSum(acc, Ln));
            if (ok) {
#pragma unroll
                for (int i = 0; i < NS; ++i) {
                    const int n = V * (lane + Ln * i);
                    if (n < N) storeV<V>(Sg + static_cast<int64_t>(p) * N + n, cur.S[j][i]);
                }
                if (lane == 0) {
                    vg[p] = cur.x[j];
                    out[p] = y * siluf(cur.z[j]);
                }
            }
        }
        if (more) cur = nxt;
    }

    // 3. the head's k_prev and θ, by slice 0 once every slice has read the old ones
    if (slices > 1) clusterWait();
    if (slice == 0) {
        for (int n = tid; n < N; n += threads) kg[n] = ksm[n];
        for (int m = tid; m < NA; m += threads) thg[m] = thsm[m];
    }
}

struct DecodePlan {
    int V, Ln, NS, threads, rows, slices;
};

bool clusterLaunchable() {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrClusterLaunch, dev) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return v != 0;
}

DecodePlan planDecode(const Exec& ex, const Mamba3ScanArgs& s) {
    const int N = s.d_state, P = s.headdim;
    DecodePlan pl;
    const bool aligned = (reinterpret_cast<uintptr_t>(s.state) & 15) == 0 && (s.batch == 1 || s.state_stride % 4 == 0);
    pl.V = N % 4 == 0 && aligned ? 4 : 1;
    const int cols = N / pl.V;
    pl.Ln = 1;
    while (pl.Ln < cols && pl.Ln < 32) pl.Ln *= 2;
    pl.NS = 1;
    while (pl.NS * pl.Ln < cols) pl.NS *= 2;  // V = 4: ≤ 2; V = 1: ≤ 8
    const int rpt = kDecodeRowsPerThread;
    const int minRows = (128 / pl.Ln) * rpt;  // one pass of a 128-thread block
    int slices = clusterLaunchable() ? kDecodeMaxSlices : 1;
    slices = std::min(slices, (P + minRows - 1) / minRows);
    // Enough blocks for the GPU: (row, head) pairs alone fill it at large batch.
    const int64_t heads = static_cast<int64_t>(s.batch) * s.nheads;
    const int64_t want = (8LL * ex.sms + heads - 1) / heads;
    if (want < slices) slices = static_cast<int>(want < 1 ? 1 : want);
    pl.rows = (P + slices - 1) / slices;
    pl.slices = (P + pl.rows - 1) / pl.rows;
    int threads = (pl.rows + rpt - 1) / rpt * pl.Ln;
    // Measured on the H200 (official head, B = 64, one slice): 256 threads 68 µs, 128 62 µs, 64 55 µs; with
    // slices (B = 1) a slice's rows fit one pass of ≤ 128 threads.
    const int cap = pl.slices == 1 ? 64 : 128;
    threads = std::min(threads, cap);
    threads = std::max(32, (threads + 31) / 32 * 32);
    threads = std::min(threads, kDecodeMaxThreads);
    pl.threads = threads;
    return pl;
}

template <int V, int NS>
void launchDecode(const Exec& ex, const DecodePlan& pl, const Mamba3ScanArgs& s) {
    auto kernel = mamba3DecodeKernel<V, NS, kDecodeRowsPerThread>;
    const int64_t blocks = static_cast<int64_t>(s.batch) * s.nheads * pl.slices;
    launchClustered("mamba3Scan decode", ex, kernel, dim3(static_cast<unsigned>(blocks)),
                    dim3(static_cast<unsigned>(pl.threads)), 0, dim3(static_cast<unsigned>(pl.slices), 1, 1), s,
                    Mamba3Offsets::of(s), pl.Ln, pl.rows, pl.slices);
}

}  // namespace

bool mamba3Decode(const Exec& ex, const Mamba3ScanArgs& s) {
    if (s.steps != 1 || s.gate_norm || s.d_state > kDecodeMaxN) return false;
    if (static_cast<int64_t>(s.batch) * s.nheads * kDecodeMaxSlices > 0x7fffffffLL) return false;
    const DecodePlan pl = planDecode(ex, s);
    if (pl.V == 4) {
        if (pl.NS == 1) launchDecode<4, 1>(ex, pl, s);
        else launchDecode<4, 2>(ex, pl, s);
    } else {
        switch (pl.NS) {
            case 1: launchDecode<1, 1>(ex, pl, s); break;
            case 2: launchDecode<1, 2>(ex, pl, s); break;
            case 4: launchDecode<1, 4>(ex, pl, s); break;
            default: launchDecode<1, 8>(ex, pl, s); break;
        }
    }
    return true;
}

}  // namespace mamba::cuda
