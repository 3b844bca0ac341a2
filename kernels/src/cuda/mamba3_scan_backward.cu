// Backward of the Mamba-3 SISO scan (training). With dstate / dstate_end (a state carry) the sequential kernel
// seeds its carries from the end state's gradient and leaves the starting state's gradient; otherwise that is
// dropped (truncated BPTT).
// The math: /work/shared/reference/mamba3-siso.md §4. The forward with checkpoints is mamba3_scan.cu;
// both advance the state with mamba3_step.cuh, so the recomputed states are the forward's bit for bit.
//
// Dispatch: calls the chunked form can take (checkpoint chunk 64, T ≥ 32, headdim ≤ 64, d_state ≤ 128, shared
// memory fits) run the chunked backward of mamba3_chunked.cu (2.6× faster at the official head, B 8 × T 256);
// everything else runs the sequential kernels below.
//
// Kernel 1, one block per (row b, head h), same thread layout as the forward. Chunks from last to first:
//  1. recompute the chunk from its checkpoint, keeping every state S_t and the step's k, q (before and
//     after the rotation), cos/sin θ and dy (the gate's backward) in a global workspace;
//  2. walk the chunk backwards with the carries G = ∂L/∂S_t (registers, same layout as S), κ (k's gradient
//     through the next step's β term, shared memory) and the angle carry φ = Σ_{s≥t} dθ_s. Per step, row
//     sums over n are xor trees in a row group; column sums over p (Gᵀx, Gᵀv_prev, dyᵀS_t) and the
//     scalars ⟨G, S_{t−1}⟩, v_prevᵀG k_prev, xᵀG k go through shared memory in warp order (two barriers).
//     It writes dz, dx, d dd_A, d trap and dΔ without its angle term straight into dproj, and per
//     (row, head) the gradients of k and q before the rotation and φ into workspaces.
// Kernel 2, one block per (row, group): the heads of the group summed in order, then the BCNorm backward
// (dB_raw, dC_raw) and the norm weights' per-row products. Kernel 3, one block per row: dangles (Σ over
// heads) and d dd_dt (the angle term added, times softplus'). Parameter gradients are column sums over
// rows in a fixed order (columnSums). No atomics: results are bit-identical from run to run.
#include "cuda_backend.h"
#include "mamba3_step.cuh"

#include <algorithm>
#include <string>

namespace mamba::cuda {
namespace train {
namespace {

using m3::Layout;

/** Whether calls with 64-step checkpoints take the chunked backward (mamba3_chunked.cu). */
constexpr bool kChunkedBackward = true;
/** Steps of the reverse walk staged in shared memory at once, at most. */
constexpr int kReverseTile = 8;
/** Most chunk-workspace floats one launch of kernel 1 may use (blocks beyond it run in later launches). */
constexpr int64_t kChunkWorkspaceCap = int64_t(1) << 28;

struct BackwardWs {
    float* chunk;        // per block: (K+1) states [P, N], K steps of ext (below), G's parking place
    int64_t per_block;   // floats per block
    int64_t first;       // the (row·H + head) index of this launch's block 0
    int chunks;          // checkpoints per row
    float* dk;           // [R][H][N]: gradient of k before the rotation (incl. bias)
    float* dq;           // [R][H][N]
    float* phi;          // [R][H][NA]: Σ_{s≥t} dθ_s
    float* pd;           // [B][H]: Σ_t Σ_p dy·x
    float* pw;           // [B][H·P]: Σ_t e·ŷ (gate norm only)
};

/** ext, per step: k before rotation [N], q before [N], k [N], q [N], cos θ [NA], sin θ [NA], dy [P]. */
__host__ __device__ inline int64_t extFloats(int N, int NA, int P) { return 4 * int64_t(N) + 2 * int64_t(NA) + P; }

/** The reverse walk's tile of TR steps in shared memory (the steps q0 … q0+n−1 of a chunk; k and x also at q0 − 1). */
struct RevTile {
    float* k;     // [TR+1][N]: k of step q0 − 1 + i (i = 0: k_prev of step q0)
    float* x;     // [TR+1][P]: x of step q0 − 1 + i (i = 0: v_prev of step q0)
    float* q;     // [TR][N]
    float* kpre;  // [TR][N]
    float* qpre;  // [TR][N]
    float* cs;    // [TR][NA]
    float* sn;    // [TR][NA]
    float* dy;    // [TR][P]
    float* coef;  // [TR][kCoef]
};

__host__ __device__ inline int64_t revTileFloats(int TR, int N, int NA, int P) {
    return static_cast<int64_t>(TR + 1) * (N + P) + static_cast<int64_t>(TR) * (3 * N + 2 * NA + P + m3::kCoef);
}

__device__ inline RevTile carveRevTile(float* base, int TR, int N, int NA, int P) {
    RevTile t;
    t.k = base;
    t.x = t.k + (TR + 1) * N;
    t.q = t.x + (TR + 1) * P;
    t.kpre = t.q + TR * N;
    t.qpre = t.kpre + TR * N;
    t.cs = t.qpre + TR * N;
    t.sn = t.cs + TR * NA;
    t.dy = t.sn + TR * NA;
    t.coef = t.dy + TR * P;
    return t;
}

/** Shared memory of kernel 1 besides its tiles: θ, κ, φ, the gate-norm weight sums, the reductions. */
__host__ __device__ inline int64_t backwardFixedFloats(int N, int NA, int P, int W) {
    return 2 * int64_t(NA) + N + P + 3 * int64_t(W) * N + 3 * W + 3 * int64_t(N) + 3;
}

template <int NS, int RP>
__global__ void __launch_bounds__(kMamba3MaxThreads)
    mamba3BackwardKernel(Mamba3ScanBackwardArgs a, Mamba3Offsets o, Layout lay, BackwardWs w, int TS, int TR) {
    extern __shared__ float sm[];
    const Mamba3ScanArgs& s = a.fwd;
    const int N = s.d_state, P = s.headdim, H = s.nheads, NA = s.nangles, T = s.steps, K = a.chunk;
    const int64_t blk = w.first + blockIdx.x;
    const int h = static_cast<int>(blk % H), b = static_cast<int>(blk / H);
    const int grp = h / (H / s.ngroups);
    const int tid = threadIdx.x, warp = tid >> 5, W = lay.threads >> 5, L = lay.L, G = lay.G;
    const int lane = tid % L, rg = tid / L;
    const int pairs = (N + 1) / 2;
    float* theta = sm;              // [NA]
    float* kappa = theta + NA;      // [N]
    float* phis = kappa + N;        // [NA]
    float* pws = phis + NA;         // [P]: Σ e·ŷ (gate norm), entry p owned by thread p mod threads
    float* redc = pws + P;          // [3][W][N]
    float* reds = redc + 3 * W * N; // [W][3]
    float* fin = reds + 3 * W;      // [3N + 3]
    float* region = fin + 3 * N + 3;
    const m3::Tile tl = m3::carveTile(region, TS, N, NA, P, 3);
    const RevTile rt = carveRevTile(region, TR, N, NA, P);

    const int64_t E = extFloats(N, NA, P);
    const int64_t PN = static_cast<int64_t>(P) * N;
    const int64_t hP = static_cast<int64_t>(h) * P;
    float* Sws = w.chunk + blockIdx.x * w.per_block;  // [K+1][P][N]
    float* ext = Sws + (K + 1) * PN;                  // [K][E]
    float* Gst = ext + K * E;                         // [RP·NS][threads]: G during the recomputation

    pdlWait();
    pdlLaunchDependents();
    for (int n = tid; n < N; n += lay.threads) kappa[n] = 0.f;
    for (int m = tid; m < NA; m += lay.threads) phis[m] = 0.f;
    for (int p = tid; p < P; p += lay.threads) pws[p] = 0.f;

    float Gc[RP][NS], carry[RP];
#pragma unroll
    for (int j = 0; j < RP; ++j) {
        carry[j] = 0.f;
#pragma unroll
        for (int i = 0; i < NS; ++i) Gc[j][i] = 0.f;
    }
    if (a.dstate_end) {  // the state carried on: its gradient seeds the carries (k_end = k_{T−1}, v_end = x_{T−1})
        const float* e = a.dstate_end + b * a.dstate_stride;
        for (int n = tid; n < N; n += lay.threads) kappa[n] = e[o.k + static_cast<int64_t>(h) * N + n];
        for (int m = tid; m < NA; m += lay.threads) phis[m] = e[o.theta + static_cast<int64_t>(h) * NA + m];
#pragma unroll
        for (int j = 0; j < RP; ++j) {
            const int p = rg + G * j;
            carry[j] = p < P ? e[o.v + hP + p] : 0.f;
#pragma unroll
            for (int i = 0; i < NS; ++i) {
                const int n = lane + L * i;
                Gc[j][i] = (p < P && n < N) ? e[hP * N + static_cast<int64_t>(p) * N + n] : 0.f;
            }
        }
    }
    float pdacc = 0.f;
    const float dskip = s.d_skip[h];
    const int64_t r0 = static_cast<int64_t>(b) * T;

    for (int c = w.chunks - 1; c >= 0; --c) {
        const int ta = c * K, cnt = min(T, ta + K) - ta;
        const int64_t rc = r0 + ta;  // the chunk's first row
        const float* ckp = a.checkpoints + (static_cast<int64_t>(b) * w.chunks + c) * o.state;
        // G waits in memory while the chunk is recomputed (registers are the limit); each thread its own
#pragma unroll
        for (int j = 0; j < RP; ++j)
#pragma unroll
            for (int i = 0; i < NS; ++i) Gst[(j * NS + i) * lay.threads + tid] = Gc[j][i];
        // ---- 1. recompute the chunk (tiles as in the forward), keeping S_t, k, q, cos/sin θ and dy ----
        {
            float S[RP][NS], kp[NS], vp[RP];
#pragma unroll
            for (int j = 0; j < RP; ++j) {
                const int p = rg + G * j;
                vp[j] = p < P ? ckp[o.v + hP + p] : 0.f;
#pragma unroll
                for (int i = 0; i < NS; ++i) {
                    const int n = lane + L * i;
                    S[j][i] = (p < P && n < N) ? ckp[hP * N + static_cast<int64_t>(p) * N + n] : 0.f;
                    if (p < P && n < N) Sws[static_cast<int64_t>(p) * N + n] = S[j][i];
                }
            }
#pragma unroll
            for (int i = 0; i < NS; ++i) kp[i] = lane + L * i < N ? ckp[o.k + static_cast<int64_t>(h) * N + lane + L * i] : 0.f;
            for (int m = tid; m < NA; m += lay.threads) theta[m] = ckp[o.theta + static_cast<int64_t>(h) * NA + m];

            for (int t0 = 0; t0 < cnt; t0 += TS) {
                const int tc = min(TS, cnt - t0);
                __syncthreads();  // the shared tiles are free
                m3::prepareTile(s, o, tl, rc + t0, tc, h, grp, theta, lay.threads, 3, a.dout, a.lddout, ext + t0 * E, E);
                for (int si = 0; si < tc; ++si) {
                    const float* cf = tl.coef + si * m3::kCoef;
                    const float alpha = cf[1], beta = cf[2], gamma = cf[3];
                    const float* kq = tl.kq + si * 2 * N;
                    const float* xz = tl.xz + si * 3 * P;
                    float kn[NS], qn[NS];
#pragma unroll
                    for (int i = 0; i < NS; ++i) {
                        const int n = lane + L * i;
                        kn[i] = n < N ? kq[n] : 0.f;
                        qn[i] = n < N ? kq[N + n] : 0.f;
                    }
                    float* Snext = Sws + (t0 + si + 1) * PN;
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
                            if (p < P && lane + L * i < N) Snext[static_cast<int64_t>(p) * N + lane + L * i] = S[j][i];
                        }
                        const float y = fmaf(dskip, x, m3::groupSum(acc, L));
                        vp[j] = x;
                        if (lane == 0 && p < P) tl.y[si * P + p] = y;
                    }
#pragma unroll
                    for (int i = 0; i < NS; ++i) kp[i] = kn[i];
                }
                __syncthreads();
                // the gate's backward per step: dy (kept in ext for the reverse walk), dz
                if (s.gate_norm) {  // Σ_p y² and Σ_p w·e·y (mean(w·e·ŷ) = ρ·mean(w·e·y)), a warp per step
                    for (int si = warp; si < tc; si += W) {
                        float yy = 0.f, wey = 0.f;
                        for (int p = tid & 31; p < P; p += 32) {
                            const float y = tl.y[si * P + p], z = tl.xz[si * 3 * P + P + p];
                            yy = fmaf(y, y, yy);
                            wey = fmaf(s.gate_norm[hP + p] * (tl.xz[si * 3 * P + 2 * P + p] * siluf(z)), y, wey);
                        }
                        yy = m3::warpSum(yy);
                        wey = m3::warpSum(wey);
                        if ((tid & 31) == 0) {
                            tl.red[2 * si] = 1.f / sqrtf(yy / static_cast<float>(P) + m3::kEps);
                            tl.red[2 * si + 1] = wey;
                        }
                    }
                    __syncthreads();
                }
                for (int p = tid; p < P; p += lay.threads) {
                    float pw = pws[p];
                    for (int si = 0; si < tc; ++si) {
                        const float* xz = tl.xz + si * 3 * P;
                        const float x = xz[p], z = xz[P + p], dout = xz[2 * P + p], y = tl.y[si * P + p];
                        const float sz = m3::sigmoidf(z), silu = z * sz, dsilu = sz * (1.f + z * (1.f - sz));
                        float dy, dz;
                        if (!s.gate_norm) {
                            dy = dout * silu;
                            dz = dout * y * dsilu;
                        } else {
                            const float rho = tl.red[2 * si], mean = rho * (tl.red[2 * si + 1] / static_cast<float>(P));
                            const float wg = s.gate_norm[hP + p], yh = y * rho, eg = dout * silu;
                            dz = dout * yh * wg * dsilu;
                            pw = fmaf(eg, yh, pw);
                            dy = rho * (wg * eg - yh * mean);
                        }
                        a.dproj[(rc + t0 + si) * a.lddproj + o.z + hP + p] = dz;
                        ext[(t0 + si) * E + 4 * N + 2 * NA + p] = dy;
                        pdacc = fmaf(dy, x, pdacc);
                    }
                    pws[p] = pw;
                }
                for (int m = tid; m < NA; m += lay.threads) theta[m] = tl.th[(tc - 1) * NA + m];
            }
        }

        // ---- 2. the chunk backwards, in tiles of TR steps staged in shared memory ----
#pragma unroll
        for (int j = 0; j < RP; ++j)
#pragma unroll
            for (int i = 0; i < NS; ++i) Gc[j][i] = Gst[(j * NS + i) * lay.threads + tid];
        float Sc[RP][NS], Sp[RP][NS];  // S_t; S_{t−1} (loaded a step ahead)
#pragma unroll
        for (int j = 0; j < RP; ++j) {
            const int p = rg + G * j;
#pragma unroll
            for (int i = 0; i < NS; ++i) {
                const int n = lane + L * i;
                const bool on = p < P && n < N;
                Sc[j][i] = on ? Sws[cnt * PN + static_cast<int64_t>(p) * N + n] : 0.f;
                Sp[j][i] = on ? Sws[(cnt - 1) * PN + static_cast<int64_t>(p) * N + n] : 0.f;
            }
        }
        for (int q1 = cnt - 1; q1 >= 0; q1 -= TR) {
            const int q0 = max(0, q1 - TR + 1), nq = q1 - q0 + 1;
            __syncthreads();  // ext is complete; the shared tiles are free
            for (int idx = tid; idx < (nq + 1) * N; idx += lay.threads) {
                const int i = idx / N, n = idx - i * N, q = q0 - 1 + i;
                rt.k[idx] = q >= 0 ? ext[q * E + 2 * N + n] : ckp[o.k + static_cast<int64_t>(h) * N + n];
            }
            for (int idx = tid; idx < (nq + 1) * P; idx += lay.threads) {
                const int i = idx / P, p = idx - i * P, q = q0 - 1 + i;
                rt.x[idx] = q >= 0 ? s.proj[(rc + q) * s.ldproj + o.x + hP + p] : ckp[o.v + hP + p];
            }
            for (int idx = tid; idx < nq * N; idx += lay.threads) {
                const int i = idx / N, n = idx - i * N;
                const float* e = ext + (q0 + i) * E;
                rt.q[idx] = e[3 * N + n];
                rt.kpre[idx] = e[n];
                rt.qpre[idx] = e[N + n];
            }
            for (int idx = tid; idx < nq * NA; idx += lay.threads) {
                const int i = idx / NA, m = idx - i * NA;
                const float* e = ext + (q0 + i) * E;
                rt.cs[idx] = e[4 * N + m];
                rt.sn[idx] = e[4 * N + NA + m];
            }
            for (int idx = tid; idx < nq * P; idx += lay.threads) {
                const int i = idx / P, p = idx - i * P;
                rt.dy[idx] = ext[(q0 + i) * E + 4 * N + 2 * NA + p];
            }
            for (int i = warp; i < nq; i += W) {
                if ((tid & 31) != 0) continue;
                const float* row = s.proj + (rc + q0 + i) * s.ldproj;
                const m3::Coeffs cf = m3::coeffs(s, o, row, h);
                float* c = rt.coef + i * m3::kCoef;
                c[0] = cf.delta;
                c[1] = cf.alpha;
                c[2] = cf.beta;
                c[3] = cf.gamma;
                c[4] = cf.A;
                c[5] = cf.sig;
                c[6] = row[o.a + h];
            }
            __syncthreads();

            for (int q = q1; q >= q0; --q) {
                const int i0 = q - q0;
                const int64_t r = rc + q;
                const float* cf = rt.coef + i0 * m3::kCoef;
                const float alpha = cf[1], beta = cf[2], gamma = cf[3];
                float kn[NS], qn[NS], kpn[NS];
#pragma unroll
                for (int i = 0; i < NS; ++i) {
                    const int n = lane + L * i;
                    const bool on = n < N;
                    kn[i] = on ? rt.k[(i0 + 1) * N + n] : 0.f;
                    kpn[i] = on ? rt.k[i0 * N + n] : 0.f;
                    qn[i] = on ? rt.q[i0 * N + n] : 0.f;
                }
                float cgx[NS], cgv[NS], cds[NS];
#pragma unroll
                for (int i = 0; i < NS; ++i) cgx[i] = cgv[i] = cds[i] = 0.f;
                float sa = 0.f, sb = 0.f, sg = 0.f;
#pragma unroll
                for (int j = 0; j < RP; ++j) {
                    const int p = rg + G * j;
                    const bool prow = p < P;
                    const float xr = prow ? rt.x[(i0 + 1) * P + p] : 0.f;
                    const float vr = prow ? rt.x[i0 * P + p] : 0.f;
                    const float dy = prow ? rt.dy[i0 * P + p] : 0.f;
                    float rk = 0.f, rkp = 0.f;
#pragma unroll
                    for (int i = 0; i < NS; ++i) {
                        const float g = fmaf(dy, qn[i], Gc[j][i]);  // ∂L/∂S_t
                        cds[i] = fmaf(dy, Sc[j][i], cds[i]);
                        rk = fmaf(g, kn[i], rk);
                        rkp = fmaf(g, kpn[i], rkp);
                        cgx[i] = fmaf(g, xr, cgx[i]);
                        cgv[i] = fmaf(g, vr, cgv[i]);
                        sa = fmaf(g, Sp[j][i], sa);
                        Gc[j][i] = __fmul_rn(alpha, g);
                        Sc[j][i] = Sp[j][i];
                    }
                    rk = m3::groupSum(rk, L);
                    rkp = m3::groupSum(rkp, L);
                    if (lane == 0 && prow)
                        a.dproj[r * a.lddproj + o.x + hP + p] = carry[j] + fmaf(dskip, dy, __fmul_rn(gamma, rk));
                    carry[j] = __fmul_rn(beta, rkp);  // reaches x_{t−1}
                    if (lane == 0) {
                        sb = fmaf(vr, rkp, sb);
                        sg = fmaf(xr, rk, sg);
                    }
                }
                if (q > 0) {  // S_{t−2}, for the next step: its latency hides behind the reductions below
#pragma unroll
                    for (int j = 0; j < RP; ++j) {
                        const int p = rg + G * j;
#pragma unroll
                        for (int i = 0; i < NS; ++i) {
                            const int n = lane + L * i;
                            Sp[j][i] = (p < P && n < N) ? Sws[(q - 1) * PN + static_cast<int64_t>(p) * N + n] : 0.f;
                        }
                    }
                }
                // column sums: the row groups of a warp by xor, then the warps in order through shared memory
#pragma unroll
                for (int i = 0; i < NS; ++i) {
                    for (int off = L; off < 32; off <<= 1) {
                        cgx[i] += __shfl_xor_sync(0xffffffffu, cgx[i], off);
                        cgv[i] += __shfl_xor_sync(0xffffffffu, cgv[i], off);
                        cds[i] += __shfl_xor_sync(0xffffffffu, cds[i], off);
                    }
                    const int n = lane + L * i;
                    if ((tid & 31) < L && n < N) {
                        redc[warp * N + n] = cgx[i];
                        redc[(W + warp) * N + n] = cgv[i];
                        redc[(2 * W + warp) * N + n] = cds[i];
                    }
                }
                sa = m3::warpSum(sa);
                sb = m3::warpSum(sb);
                sg = m3::warpSum(sg);
                if ((tid & 31) == 0) {
                    reds[warp * 3] = sa;
                    reds[warp * 3 + 1] = sb;
                    reds[warp * 3 + 2] = sg;
                }
                __syncthreads();
                for (int idx = tid; idx < 3 * N + 3; idx += lay.threads) {
                    float v = 0.f;
                    if (idx < 3 * N) {
                        const int which = idx / N, n = idx % N;
                        for (int u = 0; u < W; ++u) v += redc[(which * W + u) * N + n];
                    } else {
                        for (int u = 0; u < W; ++u) v += reds[u * 3 + idx - 3 * N];
                    }
                    fin[idx] = v;
                }
                __syncthreads();
                // k and q: κ, RoPE backward, the angle carry
                float* dkr = w.dk + (r * H + h) * N;
                float* dqr = w.dq + (r * H + h) * N;
                for (int m = tid; m < pairs; m += lay.threads) {
                    const int n0 = 2 * m, n1 = 2 * m + 1;
                    const bool two = n1 < N;
                    const float dk0 = kappa[n0] + gamma * fin[n0];
                    const float dk1 = two ? kappa[n1] + gamma * fin[n1] : 0.f;
                    kappa[n0] = beta * fin[N + n0];
                    if (two) kappa[n1] = beta * fin[N + n1];
                    const float dq0 = fin[2 * N + n0], dq1 = two ? fin[2 * N + n1] : 0.f;
                    float dkp0 = dk0, dkp1 = dk1, dqp0 = dq0, dqp1 = dq1;
                    if (m < NA) {
                        const float cs = rt.cs[i0 * NA + m], sn = rt.sn[i0 * NA + m];
                        const float* kpr = rt.kpre + i0 * N;
                        const float* qpr = rt.qpre + i0 * N;
                        const float kp0 = kpr[n0], kp1 = kpr[n1], qp0 = qpr[n0], qp1 = qpr[n1];
                        dkp0 = cs * dk0 + sn * dk1;
                        dkp1 = cs * dk1 - sn * dk0;
                        dqp0 = cs * dq0 + sn * dq1;
                        dqp1 = cs * dq1 - sn * dq0;
                        const float dth = dk0 * (-sn * kp0 - cs * kp1) + dk1 * (cs * kp0 - sn * kp1) +
                                          dq0 * (-sn * qp0 - cs * qp1) + dq1 * (cs * qp0 - sn * qp1);
                        phis[m] += dth;
                        w.phi[(r * H + h) * NA + m] = phis[m];
                    }
                    dkr[n0] = dkp0;
                    dqr[n0] = dqp0;
                    if (two) {
                        dkr[n1] = dkp1;
                        dqr[n1] = dqp1;
                    }
                }
                if (tid == lay.threads - 1) {  // the head's scalars
                    const float delta = cf[0], A = cf[4], sig = cf[5], u = cf[6];
                    const float da = fin[3 * N], db = fin[3 * N + 1], dg = fin[3 * N + 2];
                    const float dad = da * alpha + db * beta;  // d(A·Δ)
                    const float ddelta = dad * A + db * alpha * (1.f - sig) + dg * sig;
                    const float dsig = (dg - db * alpha) * delta;
                    const bool floored = -m3::heavyTail(u) > -s.a_floor;
                    const float dht = u >= 0.f ? 1.f : 1.f / ((1.f - u) * (1.f - u));
                    float* dr = a.dproj + r * a.lddproj;
                    dr[o.dt + h] = ddelta;  // kernel 3 adds the angle term and applies softplus'
                    dr[o.a + h] = floored ? 0.f : -(dad * delta) * dht;
                    dr[o.trap + h] = dsig * (sig * (1.f - sig));
                }
            }
        }
    }
    // per (row, head) parameter partials: Σ dy·x (warps in order), the gate-norm weight sums
    pdacc = m3::warpSum(pdacc);
    __syncthreads();
    if (a.dstate) {  // past step 0 the carries are ∂L/∂(starting state): S (G), k_prev (κ), v_prev, θ (φ)
        float* d = a.dstate + b * a.dstate_stride;
        for (int n = tid; n < N; n += lay.threads) d[o.k + static_cast<int64_t>(h) * N + n] = kappa[n];
        for (int m = tid; m < NA; m += lay.threads) d[o.theta + static_cast<int64_t>(h) * NA + m] = phis[m];
#pragma unroll
        for (int j = 0; j < RP; ++j) {
            const int p = rg + G * j;
            if (p >= P) continue;
            if (lane == 0) d[o.v + hP + p] = carry[j];
#pragma unroll
            for (int i = 0; i < NS; ++i) {
                const int n = lane + L * i;
                if (n < N) d[hP * N + static_cast<int64_t>(p) * N + n] = Gc[j][i];
            }
        }
    }
    if ((tid & 31) == 0) reds[warp] = pdacc;
    __syncthreads();
    if (tid == 0) {
        float v = 0.f;
        for (int u = 0; u < W; ++u) v += reds[u];
        w.pd[blk] = v;
    }
    if (s.gate_norm)
        for (int p = tid; p < P; p += lay.threads) w.pw[blk * P + p] = pws[p];
}

/** BCNorm backward of one (row, group): dB̂ = Σ_{h∈g} dk (heads in order), then RMSNorm's backward. */
__global__ void mamba3NormBackwardKernel(Mamba3ScanBackwardArgs a, Mamba3Offsets o, const float* dk, const float* dq,
                                         float* prod) {
    __shared__ float part[32];
    pdlWait();
    pdlLaunchDependents();
    const Mamba3ScanArgs& s = a.fwd;
    const int N = s.d_state, H = s.nheads, ng = s.ngroups, hpg = H / ng;
    const int64_t r = blockIdx.x / ng;
    const int g = static_cast<int>(blockIdx.x % ng);
    const int tid = threadIdx.x, n = tid;
    const float* row = s.proj + r * s.ldproj;
    const int64_t R = static_cast<int64_t>(s.batch) * s.steps;
    for (int which = 0; which < 2; ++which) {
        const float* raw = row + (which ? o.c : o.b) + static_cast<int64_t>(g) * N;
        const float* wn = which ? s.c_norm : s.b_norm;
        const float* src = which ? dq : dk;
        const float rs = m3::rmsInv(raw, N);
        float d = 0.f, bh = 0.f, wd = 0.f;
        if (n < N) {
            for (int h = g * hpg; h < (g + 1) * hpg; ++h) d += src[(r * H + h) * N + n];
            bh = raw[n] * rs;
            wd = wn[n] * d;
        }
        const float v = m3::warpSum(wd * bh);
        __syncthreads();  // part is reused by the second pass
        if ((tid & 31) == 0) part[tid >> 5] = v;
        __syncthreads();
        float dot = 0.f;
        for (int u = 0; u < static_cast<int>(blockDim.x >> 5); ++u) dot += part[u];
        if (n < N) {
            a.dproj[r * a.lddproj + (which ? o.c : o.b) + static_cast<int64_t>(g) * N + n] =
                rs * (wd - bh * (dot / static_cast<float>(N)));
            prod[(which * R * ng + r * ng + g) * N + n] = d * bh;
        }
    }
}

/** One row: dangles = Σ_h φ·πΔ·(1 − tanh²), and d dd_dt = (dΔ + Σ_a φ·π·tanh(angles))·softplus'. */
__global__ void mamba3AngleDtKernel(Mamba3ScanBackwardArgs a, Mamba3Offsets o, const float* phi) {
    pdlWait();
    pdlLaunchDependents();
    const Mamba3ScanArgs& s = a.fwd;
    const int H = s.nheads, NA = s.nangles;
    const int64_t r = blockIdx.x;
    const float* row = s.proj + r * s.ldproj;
    float* dr = a.dproj + r * a.lddproj;
    const float* ph = phi + r * H * NA;
    for (int h = threadIdx.x; h < H; h += blockDim.x) {
        float term = 0.f;
        for (int m = 0; m < NA; ++m) term = fmaf(ph[h * NA + m], m3::kPi * tanhf(row[o.angle + m]), term);
        const float u = row[o.dt + h] + s.dt_bias[h];
        dr[o.dt + h] = (dr[o.dt + h] + term) * (u > 20.f ? 1.f : m3::sigmoidf(u));
    }
    for (int m = threadIdx.x; m < NA; m += blockDim.x) {
        float acc = 0.f;
        for (int h = 0; h < H; ++h) acc = fmaf(ph[h * NA + m], softplusf(row[o.dt + h] + s.dt_bias[h]), acc);
        const float th = tanhf(row[o.angle + m]);
        dr[o.angle + m] = acc * m3::kPi * (1.f - th * th);
    }
}

template <int NS>
void launchBackwardRp(int rp, const Exec& ex, dim3 grid, const Layout& lay, size_t smem, const Mamba3ScanBackwardArgs& a,
                      const BackwardWs& w, int ts, int tr) {
    auto go = [&](auto kernel) {
        if (smem > 48 * 1024)
            check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, ex.smem_optin),
                  "cudaFuncSetAttribute (mamba3 backward)");
        launch("mamba3Scan backward", ex, kernel, grid, dim3(lay.threads), smem, a, Mamba3Offsets::of(a.fwd), lay, w, ts, tr);
    };
    switch (rp) {
        case 1: go(mamba3BackwardKernel<NS, 1>); break;
        case 2: go(mamba3BackwardKernel<NS, 2>); break;
        case 4: go(mamba3BackwardKernel<NS, 4>); break;
        case 8: go(mamba3BackwardKernel<NS, 8>); break;
        default:
            if constexpr (NS < 8) go(mamba3BackwardKernel<NS, 16>);
            break;
    }
}

}  // namespace

void mamba3ScanBackward(const Exec& ex, const Mamba3ScanBackwardArgs& a, const Scratch& scratch) {
    const Mamba3ScanArgs& s = a.fwd;
    if (s.batch == 0 || s.steps == 0) return;
    const int N = s.d_state, P = s.headdim, H = s.nheads, NA = s.nangles, K = a.chunk;
    const int64_t R = static_cast<int64_t>(s.batch) * s.steps;
    // The chunked backward drops the starting state's gradient: a state carry takes the sequential kernels.
    if (kChunkedBackward && !a.dstate && !a.dstate_end && mamba3ChunkedBackwardUsable(ex, a)) {
        float* dk = scratch.get(1, 2 * R * H * N);
        float* dq = dk + R * H * N;
        float* prod = scratch.get(4, 2 * R * s.ngroups * N);
        mamba3ChunkedBackward(ex, a, scratch, dk, dq);
        const Mamba3Offsets o = Mamba3Offsets::of(s);
        const int64_t norm_blocks = R * s.ngroups;
        if (norm_blocks > 0x7fffffff) fail("mamba3ScanBackward: too many rows");
        launch("mamba3Scan backward BCNorm", ex, mamba3NormBackwardKernel, dim3(static_cast<unsigned>(norm_blocks)),
               dim3((N + 31) / 32 * 32), 0, a, o, static_cast<const float*>(dk), static_cast<const float*>(dq), prod);
        if (a.d_b_bias) columnSums(ex, dk, int64_t(H) * N, nullptr, 0, nullptr, R, H * N, a.d_b_bias, scratch);
        if (a.d_c_bias) columnSums(ex, dq, int64_t(H) * N, nullptr, 0, nullptr, R, H * N, a.d_c_bias, scratch);
        if (a.d_b_norm) columnSums(ex, prod, N, nullptr, 0, nullptr, R * s.ngroups, N, a.d_b_norm, scratch);
        if (a.d_c_norm)
            columnSums(ex, prod + R * s.ngroups * N, N, nullptr, 0, nullptr, R * s.ngroups, N, a.d_c_norm, scratch);
        if (a.d_dt_bias) columnSums(ex, a.dproj + o.dt, a.lddproj, nullptr, 0, nullptr, R, H, a.d_dt_bias, scratch);
        return;
    }
    const Mamba3Shape sh = mamba3Shape(P, N, kMamba3ForwardPerThread);
    const int W = sh.lay.threads / 32;
    // Tiles: the recomputation's up to kMamba3TileSteps steps, the reverse walk's up to kReverseTile, as
    // shared memory allows (the two share one region).
    const int64_t fixed = backwardFixedFloats(N, NA, P, W);
    const int64_t room = std::max<int64_t>(ex.smem_optin, 48 * 1024) / static_cast<int64_t>(sizeof(float)) - fixed;
    Mamba3ScanArgs tiled = s;
    tiled.steps = std::min(s.steps, K);
    const int ts = mamba3TileSteps(tiled, 3, room);
    int tr = std::min(kReverseTile, tiled.steps);
    while (tr > 1 && revTileFloats(tr, N, NA, P) > room) --tr;
    const int64_t region = std::max(m3::tileFloats(ts, N, NA, P, 3), revTileFloats(tr, N, NA, P));
    const size_t smem = static_cast<size_t>(fixed + region) * sizeof(float);
    if (smem > static_cast<size_t>(std::max(ex.smem_optin, 48 * 1024)))
        fail("mamba3ScanBackward: headdim " + std::to_string(P) + " with d_state " + std::to_string(N) + " needs " +
             std::to_string(smem) + " bytes of shared memory per block; the device has " + std::to_string(ex.smem_optin));

    BackwardWs w{};
    w.chunks = (s.steps + K - 1) / K;
    w.per_block = (K + 1) * static_cast<int64_t>(P) * N + K * extFloats(N, NA, P) +
                  static_cast<int64_t>(sh.rp) * sh.ns * sh.lay.threads;
    const int64_t total = static_cast<int64_t>(s.batch) * H;
    const int64_t per_launch = std::min(total, std::max<int64_t>(1, kChunkWorkspaceCap / w.per_block));
    if (per_launch > 0x7fffffff) fail("mamba3ScanBackward: too many rows × heads for one launch");
    w.chunk = scratch.get(0, per_launch * w.per_block);
    w.dk = scratch.get(1, 2 * R * H * N);
    w.dq = w.dk + R * H * N;
    const int64_t n2 = R * H * NA + total + total * P;
    w.phi = scratch.get(2, n2);
    w.pd = w.phi + R * H * NA;
    w.pw = w.pd + total;
    float* prod = scratch.get(4, 2 * R * s.ngroups * N);

    for (w.first = 0; w.first < total; w.first += per_launch) {
        const dim3 grid(static_cast<unsigned>(std::min(per_launch, total - w.first)));
        switch (sh.ns) {
            case 1: launchBackwardRp<1>(sh.rp, ex, grid, sh.lay, smem, a, w, ts, tr); break;
            case 2: launchBackwardRp<2>(sh.rp, ex, grid, sh.lay, smem, a, w, ts, tr); break;
            case 4: launchBackwardRp<4>(sh.rp, ex, grid, sh.lay, smem, a, w, ts, tr); break;
            default: launchBackwardRp<8>(sh.rp, ex, grid, sh.lay, smem, a, w, ts, tr); break;
        }
    }
    const Mamba3Offsets o = Mamba3Offsets::of(s);
    const int64_t norm_blocks = R * s.ngroups;
    if (norm_blocks > 0x7fffffff || R > 0x7fffffff) fail("mamba3ScanBackward: too many rows");
    launch("mamba3Scan backward BCNorm", ex, mamba3NormBackwardKernel, dim3(static_cast<unsigned>(norm_blocks)),
           dim3((N + 31) / 32 * 32), 0, a, o, static_cast<const float*>(w.dk), static_cast<const float*>(w.dq), prod);
    launch("mamba3Scan backward angles dt", ex, mamba3AngleDtKernel, dim3(static_cast<unsigned>(R)), dim3(128), 0, a, o,
           static_cast<const float*>(w.phi));

    // parameter gradients: sums over rows in a fixed order
    if (a.d_b_bias) columnSums(ex, w.dk, int64_t(H) * N, nullptr, 0, nullptr, R, H * N, a.d_b_bias, scratch);
    if (a.d_c_bias) columnSums(ex, w.dq, int64_t(H) * N, nullptr, 0, nullptr, R, H * N, a.d_c_bias, scratch);
    if (a.d_b_norm) columnSums(ex, prod, N, nullptr, 0, nullptr, R * s.ngroups, N, a.d_b_norm, scratch);
    if (a.d_c_norm)
        columnSums(ex, prod + R * s.ngroups * N, N, nullptr, 0, nullptr, R * s.ngroups, N, a.d_c_norm, scratch);
    if (a.d_dt_bias) columnSums(ex, a.dproj + o.dt, a.lddproj, nullptr, 0, nullptr, R, H, a.d_dt_bias, scratch);
    if (a.d_d_skip) columnSums(ex, w.pd, H, nullptr, 0, nullptr, s.batch, H, a.d_d_skip, scratch);
    if (a.d_gate_norm && s.gate_norm)
        columnSums(ex, w.pw, int64_t(H) * P, nullptr, 0, nullptr, s.batch, H * P, a.d_gate_norm, scratch);
}

}  // namespace train

void CudaBackend::mamba3ScanBackward(const Mamba3ScanBackwardArgs& a) {
    Lock lock(mu_);
    const Mamba3ScanArgs& s = a.fwd;
    validateMamba3(s, "mamba3ScanBackward", false);
    if (s.batch > 0 && s.steps > 0) {
        if (a.chunk < 1) fail("mamba3ScanBackward: chunk = " + std::to_string(a.chunk) + " must be ≥ 1");
        if (!a.checkpoints) fail("mamba3ScanBackward: null checkpoints");
        if (!a.dout || !a.dproj) fail("mamba3ScanBackward: null dout or dproj");
        if (a.lddout < s.dInner())
            fail("mamba3ScanBackward: lddout = " + std::to_string(a.lddout) + " is less than nheads·headdim = " +
                 std::to_string(s.dInner()));
        if (a.lddproj < s.projWidth())
            fail("mamba3ScanBackward: lddproj = " + std::to_string(a.lddproj) + " is less than the in_proj width " +
                 std::to_string(s.projWidth()));
    }
    enter();
    train::mamba3ScanBackward(nextExec(), a, trainScratch());
}

}  // namespace mamba::cuda
