// CPU backward stages for training (see cpu_backward.h). Products go to OpenBLAS (the weight gradients
// are one sgemm over all B·T rows, so their summation order is OpenBLAS's for that shape, independent of
// our thread count); the fused stages are our loops, split over (batch row, channel block) tasks whose
// partial sums are combined afterwards in a fixed order.
#include "cpu_backward.h"
#include "blas_threads.h"

#include "fast_math.h"
#include "thread_pool.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace mamba::cpu {
namespace {

// Channels per task; the same block size as the forward kernels.
constexpr int kBlock = 64;
// Below this much work a stage runs on the calling thread.
constexpr int64_t kMinParallelWork = 1 << 14;
// Fixed chunk of elementwise reductions: partial sums per chunk, then summed in chunk order.
constexpr int64_t kReduceChunk = 1 << 14;

static inline float dsilu(float x) {
    const float s = sigmoid(x);
    return s * (1.f + x * (1.f - s));
}

/** acc[j] += Σ_r x[r, j] for j < cols, rows in order; parallel over column blocks. */
void columnSums(const float* x, int64_t ldx, int64_t rows, int cols, float* acc) {
    const int blocks = (cols + kBlock - 1) / kBlock;
    pool().parallelFor(blocks, rows * cols > kMinParallelWork ? 1 : 1 << 30, [&](int64_t b0, int64_t b1) {
        for (int64_t blk = b0; blk < b1; ++blk) {
            const int j0 = static_cast<int>(blk) * kBlock, nj = std::min(kBlock, cols - j0);
            float s[kBlock] = {};
            for (int64_t r = 0; r < rows; ++r) {
                const float* xr = x + r * ldx + j0;
#pragma omp simd
                for (int j = 0; j < nj; ++j) s[j] += xr[j];
            }
            for (int j = 0; j < nj; ++j) acc[j0 + j] += s[j];
        }
    });
}

/**
 * Reusable workspaces: growing buffers kept between calls, so steady-state training allocates nothing (fresh
 * pages cost a page fault per 4 KiB). scratch() belongs to the calling thread (the stage's partial sums),
 * workerScratch() to whichever pool thread runs a task. Contents are never assumed zero.
 */
float* growBuffer(std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
    return v.data();
}
float* scratch(int slot, int64_t n) {
    thread_local std::vector<float> bufs[4];
    return growBuffer(bufs[slot], n);
}
float* workerScratch(int slot, int64_t n) {
    thread_local std::vector<float> bufs[8];
    return growBuffer(bufs[slot], n);
}

// OpenBLAS's sgemm results depend on its own thread count (its partition changes the kernels that compute
// an element), so the training products run it single-threaded (BlasSingleThread), on fixed tiles spread
// over our pool.

// Tiles of C, each computed by one sgemm call: about 8 row tiles of 32..256 rows (a multiple of 16) by
// 256-column tiles. A function of the shape only, never of the thread count.
constexpr int64_t kTileN = 256;
inline int64_t tileRows(int64_t M) { return std::min<int64_t>(256, std::max<int64_t>(32, (M / 8 + 15) / 16 * 16)); }

/**
 * C[M, N] = beta·C + op(A)·op(B) (row-major; op(A) is [M, K], op(B) is [K, N]) as independent tiles of
 * C, each with the whole K range in one single-threaded sgemm.
 */
void gemmTiled(bool transA, bool transB, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
               int64_t ldb, float beta, float* C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    BlasSingleThread single;
    const int64_t TM = tileRows(M);
    const int64_t tm = (M + TM - 1) / TM, tn = (N + kTileN - 1) / kTileN;
    const int64_t perTile = std::min(M, TM) * std::min(N, kTileN) * std::max<int64_t>(K, 1);
    pool().parallelFor(tm * tn, perTile >= (1 << 16) ? 1 : std::max<int64_t>(1, (1 << 16) / perTile),
                       [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const int64_t i0 = t / tn * TM, j0 = t % tn * kTileN;
            const int64_t m = std::min(TM, M - i0), n = std::min(kTileN, N - j0);
            const float* a = transA ? A + i0 : A + i0 * lda;  // op(A) rows i0..: columns of A when transposed
            const float* b = transB ? B + j0 * ldb : B + j0;
            float* c = C + i0 * ldc + j0;
            if (K == 0) {  // sgemm with K = 0 only scales C
                for (int64_t i = 0; i < m; ++i)
                    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
                continue;
            }
            cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                        static_cast<int>(m), static_cast<int>(n), static_cast<int>(K), 1.f, a, static_cast<int>(lda), b,
                        static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
        }
    });
}

/** Deterministic Σ f(i) over [0, n): fixed chunks summed in double, chunk partials added in order. */
template <class F>
double chunkedSum(int64_t n, F f) {
    const int64_t chunks = (n + kReduceChunk - 1) / kReduceChunk;
    std::vector<double> part(static_cast<size_t>(chunks), 0.0);
    pool().parallelFor(chunks, n > 4 * kReduceChunk ? 1 : 1 << 30, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) part[c] = f(c * kReduceChunk, std::min(n, (c + 1) * kReduceChunk));
    });
    double s = 0;
    for (double v : part) s += v;
    return s;
}

}  // namespace

void linearDeterministic(const float* x, int64_t ldx, int64_t rows, const Matrix& w, const float* bias, float* y,
                         int64_t ldy, float beta) {
    if (bias) {  // y = beta·y + bias, then accumulate the product into it
        for (int64_t r = 0; r < rows; ++r) {
            float* yr = y + r * ldy;
            for (int o = 0; o < w.out; ++o) yr[o] = (beta == 0.f ? 0.f : beta * yr[o]) + bias[o];
        }
        beta = 1.f;
    }
    // y[rows, out] = beta·y + x[rows, in] · W[out, in]ᵀ
    gemmTiled(false, true, rows, w.out, w.in, x, ldx, w.f32, w.in, beta, y, ldy);
}

void linearBackward(const float* dy, int64_t lddy, int64_t rows, const Matrix& w, float* dx, int64_t lddx,
                    float beta) {
    // dx[rows, in] = beta·dx + dy[rows, out] · W[out, in]
    gemmTiled(false, false, rows, w.in, w.out, dy, lddy, w.f32, w.in, beta, dx, lddx);
}

void linearWeightGrad(const float* dy, int64_t lddy, const float* x, int64_t ldx, int64_t rows, int out, int in,
                      float* dw, float* dbias) {
    // dw[out, in] += dy[rows, out]ᵀ · x[rows, in]: every row in one product per tile.
    gemmTiled(true, false, out, in, rows, dy, lddy, x, ldx, 1.f, dw, in);
    if (dbias) columnSums(dy, lddy, rows, out, dbias);
}

void rmsnormBackward(const float* x, int64_t ldx, const float* w, const float* dy, int64_t lddy, int64_t rows, int d,
                     float eps, float* dx, int64_t lddx, float beta, float* dw) {
    float* rstd = scratch(3, rows);
    // Per row: ρ = 1/rms, x̂ = ρ·x, g = w ⊙ dy; dx = ρ·(g − x̂·mean(g ⊙ x̂)).
    pool().parallelFor(rows, kMinParallelWork / std::max(1, d), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* xr = x + r * ldx;
            const float* gr = dy + r * lddy;
            float* out = dx + r * lddx;
            float ss = 0.f;
#pragma omp simd reduction(+ : ss)
            for (int j = 0; j < d; ++j) ss += xr[j] * xr[j];
            const float rho = 1.f / std::sqrt(ss / static_cast<float>(d) + eps);
            rstd[r] = rho;
            float dot = 0.f;
#pragma omp simd reduction(+ : dot)
            for (int j = 0; j < d; ++j) dot += w[j] * gr[j] * xr[j];
            const float c = dot * rho * rho / static_cast<float>(d);  // mean(g ⊙ x̂) / ρ … times x̂ = c·x·ρ
            if (beta == 0.f) {
#pragma omp simd
                for (int j = 0; j < d; ++j) out[j] = rho * (w[j] * gr[j] - c * xr[j]);
            } else {
#pragma omp simd
                for (int j = 0; j < d; ++j) out[j] = beta * out[j] + rho * (w[j] * gr[j] - c * xr[j]);
            }
        }
    });
    // dw[j] += Σ_r dy[r, j]·x[r, j]·ρ_r, rows in order, parallel over column blocks.
    const int blocks = (d + kBlock - 1) / kBlock;
    pool().parallelFor(blocks, rows * d > kMinParallelWork ? 1 : 1 << 30, [&](int64_t b0, int64_t b1) {
        for (int64_t blk = b0; blk < b1; ++blk) {
            const int j0 = static_cast<int>(blk) * kBlock, nj = std::min(kBlock, d - j0);
            float s[kBlock] = {};
            for (int64_t r = 0; r < rows; ++r) {
                const float* xr = x + r * ldx + j0;
                const float* gr = dy + r * lddy + j0;
                const float rho = rstd[r];
#pragma omp simd
                for (int j = 0; j < nj; ++j) s[j] += gr[j] * (xr[j] * rho);
            }
            for (int j = 0; j < nj; ++j) dw[j0 + j] += s[j];
        }
    });
}

void convSiluBackward(const ConvBackwardArgs& c) {
    const int K = c.width, H = K - 1, T = c.steps, C = c.channels;
    const int blocks = (C + kBlock - 1) / kBlock;
    // Per-row partial weight gradients, summed over rows in row order afterwards.
    float* pdw = scratch(0, static_cast<int64_t>(c.batch) * C * K);
    float* pdb = scratch(1, static_cast<int64_t>(c.batch) * C);
    const int64_t work = static_cast<int64_t>(c.batch) * T * C * K;
    pool().parallelFor(static_cast<int64_t>(c.batch) * blocks, work > kMinParallelWork ? 1 : 1 << 30,
                       [&](int64_t t0, int64_t t1) {
        float* dcbuf = workerScratch(0, static_cast<int64_t>(T) * kBlock);
        for (int64_t task = t0; task < t1; ++task) {
            const int b = static_cast<int>(task / blocks);
            const int d0 = static_cast<int>(task % blocks) * kBlock;
            const int nd = std::min(kBlock, C - d0);
            const float* hist = c.history + b * c.history_stride;
            const int64_t row0 = static_cast<int64_t>(b) * T;
            float wt[8 * kBlock];  // this block's taps transposed to [k][j] (width ≤ 8, validated)
            for (int j = 0; j < nd; ++j)
                for (int k = 0; k < K; ++k) wt[k * kBlock + j] = c.w[static_cast<int64_t>(d0 + j) * K + k];
            float gw[8 * kBlock] = {}, gb[kBlock] = {};
            const float* src[8];
            int64_t stride[8];
            // dc_t = du_t ⊙ SiLU'(conv_t), conv recomputed; weight gradients accumulate over t in order.
            for (int t = 0; t < T; ++t) {
                for (int k = 0; k < K; ++k) {  // input of tap k: x_{t-H+k}, or the starting history before 0
                    const int ts = t - H + k;
                    if (ts >= 0) {
                        src[k] = c.x + (row0 + ts) * c.ldx + d0;
                        stride[k] = 1;
                    } else {
                        src[k] = hist + static_cast<int64_t>(d0) * H + H + ts;
                        stride[k] = H;
                    }
                }
                float acc[kBlock];
#pragma omp simd
                for (int j = 0; j < nd; ++j) acc[j] = c.bias[d0 + j];
                for (int k = 0; k < K; ++k) {
                    const float* sk = src[k];
                    const int64_t st = stride[k];
#pragma omp simd
                    for (int j = 0; j < nd; ++j) acc[j] += wt[k * kBlock + j] * sk[j * st];
                }
                const float* dur = c.du + (row0 + t) * c.ldu + d0;
                float* dc = dcbuf + static_cast<int64_t>(t) * kBlock;
#pragma omp simd
                for (int j = 0; j < nd; ++j) {
                    dc[j] = dur[j] * dsilu(acc[j]);
                    gb[j] += dc[j];
                }
                for (int k = 0; k < K; ++k) {
                    const float* sk = src[k];
                    const int64_t st = stride[k];
#pragma omp simd
                    for (int j = 0; j < nd; ++j) gw[k * kBlock + j] += dc[j] * sk[j * st];
                }
            }
            // dx_s = Σ_k w[k]·dc_{s+H-k} over taps whose output step lies inside [0, T).
            for (int s = 0; s < T; ++s) {
                float acc[kBlock] = {};
                for (int k = 0; k < K; ++k) {
                    const int t = s + H - k;
                    if (t >= T) continue;
                    const float* dc = dcbuf + static_cast<int64_t>(t) * kBlock;
#pragma omp simd
                    for (int j = 0; j < nd; ++j) acc[j] += wt[k * kBlock + j] * dc[j];
                }
                std::copy(acc, acc + nd, c.dx + (row0 + s) * c.lddx + d0);
            }
            float* pw = pdw + (static_cast<int64_t>(b) * C + d0) * K;
            for (int j = 0; j < nd; ++j)
                for (int k = 0; k < K; ++k) pw[j * K + k] = gw[k * kBlock + j];
            std::copy(gb, gb + nd, pdb + static_cast<int64_t>(b) * C + d0);
        }
    });
    pool().parallelFor(C, kMinParallelWork / std::max(1, c.batch * K), [&](int64_t e0, int64_t e1) {
        for (int64_t d = e0; d < e1; ++d) {
            for (int b = 0; b < c.batch; ++b) {
                const float* pw = pdw + (static_cast<int64_t>(b) * C + d) * K;
                for (int k = 0; k < K; ++k) c.dw[d * K + k] += pw[k];
                c.dbias[d] += pdb[static_cast<int64_t>(b) * C + d];
            }
        }
    });
}

namespace {

/** exp(Δ·A) and the state update h ← Ā·h + Δu·B for one step of a channel block, [n][j] layout. */
inline void scanStep(int N, int nd, const float* delta, const float* du, const float* At, const float* Bt,
                     const float* hprev, float* h, float* abar) {
    for (int n = 0; n < N; ++n) {
        const float bn = Bt[n];
        const float* an = At + n * kBlock;
        const float* hp = hprev + n * kBlock;
        float* hn = h + n * kBlock;
        if (abar) {
            float* e = abar + n * kBlock;
#pragma omp simd
            for (int j = 0; j < nd; ++j) {
                e[j] = fastExp(delta[j] * an[j]);
                hn[j] = e[j] * hp[j] + du[j] * bn;
            }
        } else {
#pragma omp simd
            for (int j = 0; j < nd; ++j) hn[j] = fastExp(delta[j] * an[j]) * hp[j] + du[j] * bn;
        }
    }
}

/** A [channels, N] block of rows d0.. (row-major, channel-major) into [n][j] with j < nd, and back. */
inline void toLanes(const float* src, int N, int nd, float* dst) {
    for (int j = 0; j < nd; ++j)
        for (int n = 0; n < N; ++n) dst[n * kBlock + j] = src[static_cast<int64_t>(j) * N + n];
}
inline void fromLanes(const float* src, int N, int nd, float* dst) {
    for (int j = 0; j < nd; ++j)
        for (int n = 0; n < N; ++n) dst[static_cast<int64_t>(j) * N + n] = src[n * kBlock + j];
}

}  // namespace

void selectiveScanTrain(const ScanArgs& s, float* checkpoints, int chunk) {
    const int N = s.d_state, T = s.steps, C = s.channels;
    const int blocks = (C + kBlock - 1) / kBlock;
    const int chunks = (T + chunk - 1) / chunk;
    const int64_t row_ckpt = static_cast<int64_t>(chunks) * C * N;
    const int64_t work = static_cast<int64_t>(s.batch) * T * C * N / 4;
    pool().parallelFor(static_cast<int64_t>(s.batch) * blocks, work > kMinParallelWork ? 1 : 1 << 30,
                       [&](int64_t t0, int64_t t1) {
        const int64_t slab = static_cast<int64_t>(N) * kBlock;
        float* H = workerScratch(0, 2 * slab);  // two states, ping-pong
        float* At = workerScratch(1, slab);
        alignas(64) float delta[kBlock], du[kBlock], y[kBlock];
        for (int64_t task = t0; task < t1; ++task) {
            const int b = static_cast<int>(task / blocks);
            const int d0 = static_cast<int>(task % blocks) * kBlock;
            const int nd = std::min(kBlock, C - d0);
            float* h = s.h + b * s.h_stride + static_cast<int64_t>(d0) * N;
            float* ckpt = checkpoints + b * row_ckpt + static_cast<int64_t>(d0) * N;
            toLanes(s.a + static_cast<int64_t>(d0) * N, N, nd, At);
            toLanes(h, N, nd, H);
            int cur = 0;
            for (int t = 0; t < T; ++t) {
                if (t % chunk == 0) fromLanes(H + cur * slab, N, nd, ckpt + static_cast<int64_t>(t / chunk) * C * N);
                const int64_t r = static_cast<int64_t>(b) * T + t;
                const float* dt = s.dt + r * C + d0;
                const float* u = s.u + r * C + d0;
                const float* z = s.z + r * s.ldz + d0;
                const float* Bt = s.bc + r * s.ldbc;
                const float* Ct = Bt + N;
#pragma omp simd
                for (int j = 0; j < nd; ++j) {
                    delta[j] = softplus(dt[j]);
                    du[j] = delta[j] * u[j];
                    y[j] = s.d_skip[d0 + j] * u[j];
                }
                float* hn = H + (1 - cur) * slab;
                scanStep(N, nd, delta, du, At, Bt, H + cur * slab, hn, nullptr);
                for (int n = 0; n < N; ++n) {
                    const float cn = Ct[n];
                    const float* hv = hn + n * kBlock;
#pragma omp simd
                    for (int j = 0; j < nd; ++j) y[j] += hv[j] * cn;
                }
                float* out = s.out + r * C + d0;
#pragma omp simd
                for (int j = 0; j < nd; ++j) out[j] = y[j] * silu(z[j]);
                cur = 1 - cur;
            }
            fromLanes(H + cur * slab, N, nd, h);
        }
    });
}

void selectiveScanBackward(const ScanBackwardArgs& s) {
    const int N = s.d_state, T = s.steps, C = s.channels, K = s.chunk;
    const int blocks = (C + kBlock - 1) / kBlock;
    const int64_t R = static_cast<int64_t>(s.batch) * T;
    const int chunks = (T + K - 1) / K;
    const int64_t row_ckpt = static_cast<int64_t>(chunks) * C * N;
    // dB_t, dC_t sum over channels: one partial per channel block, added in block order afterwards.
    float* pbc = scratch(0, static_cast<int64_t>(blocks) * R * 2 * N);
    // dA, dD sum over rows: one partial per row, added in row order afterwards.
    float* pda = scratch(1, static_cast<int64_t>(s.batch) * C * N);
    float* pdd = scratch(2, static_cast<int64_t>(s.batch) * C);
    const int64_t work = R * C * N / 2;
    pool().parallelFor(static_cast<int64_t>(s.batch) * blocks, work > kMinParallelWork ? 1 : 1 << 30,
                       [&](int64_t t0, int64_t t1) {
        // Per task, states are laid out [n][j] (state index major, channel minor) so every inner loop runs
        // over the block's channels in SIMD lanes; only dB/dC need a sum over channels (one per n and step).
        const int64_t slab = static_cast<int64_t>(N) * kBlock;  // one step's state of a channel block
        float* hs = workerScratch(1, static_cast<int64_t>(K + 1) * slab);  // h_{ta-1} .. h_{tb-1}
        float* abar = workerScratch(2, static_cast<int64_t>(K) * slab);    // exp(Δ·A) per step
        float* G = workerScratch(3, slab);   // ∂L/∂h carried backwards
        float* gA = workerScratch(4, slab);  // Σ_t G·Δ·Ā·h_{t-1} (× A at the end)
        float* At = workerScratch(5, slab);  // A transposed to [n][j]
        alignas(64) float delta[kBlock], du[kBlock], dy[kBlock], sGB[kBlock], sDelta[kBlock], gD[kBlock];
        alignas(64) float yv[kBlock];
        for (int64_t task = t0; task < t1; ++task) {
            const int b = static_cast<int>(task / blocks);
            const int blk = static_cast<int>(task % blocks);
            const int d0 = blk * kBlock;
            const int nd = std::min(kBlock, C - d0);
            const int64_t row0 = static_cast<int64_t>(b) * T;
            const float* Dskip = s.d_skip + d0;
            const float* ckpt = s.checkpoints + b * row_ckpt + static_cast<int64_t>(d0) * N;
            toLanes(s.a + static_cast<int64_t>(d0) * N, N, nd, At);

            // Chunks in reverse: recompute each chunk's states from its checkpoint, then walk it backwards.
            std::fill(G, G + slab, 0.f);
            std::fill(gA, gA + slab, 0.f);
            std::fill(gD, gD + kBlock, 0.f);
            for (int c = chunks - 1; c >= 0; --c) {
                const int ta = c * K, tb = std::min(T, ta + K);
                // The chunk's states from its checkpoint: the forward's recurrence, step by step.
                toLanes(ckpt + static_cast<int64_t>(c) * C * N, N, nd, hs);
                for (int t = ta; t < tb; ++t) {
                    const int64_t r = row0 + t;
                    const float* dt = s.dt + r * C + d0;
                    const float* u = s.u + r * C + d0;
#pragma omp simd
                    for (int j = 0; j < nd; ++j) {
                        delta[j] = softplus(dt[j]);
                        du[j] = delta[j] * u[j];
                    }
                    scanStep(N, nd, delta, du, At, s.bc + r * s.ldbc, hs + static_cast<int64_t>(t - ta) * slab,
                             hs + static_cast<int64_t>(t - ta + 1) * slab, abar + static_cast<int64_t>(t - ta) * slab);
                }
                for (int t = tb - 1; t >= ta; --t) {
                    const int64_t r = row0 + t;
                    const float* dt = s.dt + r * C + d0;
                    const float* u = s.u + r * C + d0;
                    const float* z = s.z + r * s.ldz + d0;
                    const float* dout = s.dout + r * C + d0;
                    const float* Bt = s.bc + r * s.ldbc;
                    const float* Ct = Bt + N;
                    const float* hcur = hs + static_cast<int64_t>(t - ta + 1) * slab;
                    const float* hprev = hs + static_cast<int64_t>(t - ta) * slab;
                    const float* ab = abar + static_cast<int64_t>(t - ta) * slab;
                    float* ddt = s.ddt + r * C + d0;
                    float* du_out = s.du + r * C + d0;
                    float* dz = s.dz + r * s.lddz + d0;
                    float* pb = pbc + (static_cast<int64_t>(blk) * R + r) * 2 * N;  // this block's dB_t, dC_t

                    // y = Σ_n h·C + D·u; the gate out = y·SiLU(z).
#pragma omp simd
                    for (int j = 0; j < nd; ++j) {
                        delta[j] = softplus(dt[j]);
                        yv[j] = Dskip[j] * u[j];
                    }
                    for (int n = 0; n < N; ++n) {
                        const float cn = Ct[n];
                        const float* h = hcur + n * kBlock;
#pragma omp simd
                        for (int j = 0; j < nd; ++j) yv[j] += h[j] * cn;
                    }
#pragma omp simd
                    for (int j = 0; j < nd; ++j) {
                        const float zj = z[j], sz = sigmoid(zj);
                        dy[j] = dout[j] * (zj * sz);
                        dz[j] = dout[j] * yv[j] * (sz * (1.f + zj * (1.f - sz)));
                        gD[j] += dy[j] * u[j];
                        du[j] = delta[j] * u[j];
                        sGB[j] = 0.f;
                        sDelta[j] = 0.f;
                    }
                    for (int n = 0; n < N; ++n) {
                        const float bn = Bt[n], cn = Ct[n];
                        const float* h = hcur + n * kBlock;
                        const float* hp = hprev + n * kBlock;
                        const float* e = ab + n * kBlock;
                        const float* an = At + n * kBlock;
                        float* g = G + n * kBlock;
                        float* ga = gA + n * kBlock;
                        float accB = 0.f, accC = 0.f;
#pragma omp simd reduction(+ : accB, accC)
                        for (int j = 0; j < nd; ++j) {
                            const float gn = g[j] + dy[j] * cn;  // ∂L/∂h_t
                            accC += dy[j] * h[j];
                            accB += gn * du[j];
                            sGB[j] += gn * bn;
                            const float gah = gn * e[j] * hp[j];
                            sDelta[j] += gah * an[j] + gn * bn * u[j];
                            ga[j] += gah * delta[j];
                            g[j] = gn * e[j];  // carried to h_{t-1}
                        }
                        pb[n] = accB;
                        pb[N + n] = accC;
                    }
#pragma omp simd
                    for (int j = 0; j < nd; ++j) {
                        du_out[j] = Dskip[j] * dy[j] + delta[j] * sGB[j];
                        const float sp = dt[j] > 20.f ? 1.f : sigmoid(dt[j]);  // softplus'
                        ddt[j] = sDelta[j] * sp;
                    }
                }
            }
            float* pa = pda + (static_cast<int64_t>(b) * C + d0) * N;
            for (int j = 0; j < nd; ++j)
                for (int n = 0; n < N; ++n) pa[static_cast<int64_t>(j) * N + n] = gA[n * kBlock + j];
            std::copy(gD, gD + nd, pdd + static_cast<int64_t>(b) * C + d0);
        }
    });
    // dB, dC: sum the channel blocks in block order.
    pool().parallelFor(R, kMinParallelWork / std::max(1, blocks * 2 * N), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            float* out = s.dbc + r * s.lddbc;
            const float* p0 = pbc + r * 2 * N;
            std::copy(p0, p0 + 2 * N, out);
            for (int blk = 1; blk < blocks; ++blk) {
                const float* p = pbc + (static_cast<int64_t>(blk) * R + r) * 2 * N;
                for (int n = 0; n < 2 * N; ++n) out[n] += p[n];
            }
        }
    });
    // dA_log = A ⊙ Σ_rows (G·Δ·Ā·h_{t-1}) (dA/dA_log = A), dD: rows in order.
    pool().parallelFor(C, kMinParallelWork / std::max(1, s.batch * N), [&](int64_t e0, int64_t e1) {
        std::vector<float> acc(N);
        for (int64_t d = e0; d < e1; ++d) {
            std::fill(acc.begin(), acc.end(), 0.f);
            float dd = 0.f;
            for (int b = 0; b < s.batch; ++b) {
                const float* p = pda + (static_cast<int64_t>(b) * C + d) * N;
                for (int n = 0; n < N; ++n) acc[n] += p[n];
                dd += pdd[static_cast<int64_t>(b) * C + d];
            }
            for (int n = 0; n < N; ++n) s.da_log[d * N + n] += acc[n] * s.a[d * N + n];
            s.dd_skip[d] += dd;
        }
    });
}

void scale(float* x, int64_t n, float s) {
    pool().parallelFor(n, kMinParallelWork * 4, [&](int64_t i0, int64_t i1) {
#pragma omp simd
        for (int64_t i = i0; i < i1; ++i) x[i] *= s;
    });
}

double sumOfSquares(const float* x, int64_t n) {
    return chunkedSum(n, [&](int64_t i0, int64_t i1) {
        double s = 0;
        for (int64_t i = i0; i < i1; ++i) s += static_cast<double>(x[i]) * x[i];
        return s;
    });
}

void adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWArgs& a) {
    const float decay = 1.f - a.lr * a.weight_decay;
    const float step = a.lr / a.bias_correction1;
    const float inv_sqrt_bc2 = 1.f / std::sqrt(a.bias_correction2);
    const float b1 = a.beta1, b2 = a.beta2, c1 = 1.f - a.beta1, c2 = 1.f - a.beta2;
    pool().parallelFor(n, kMinParallelWork * 4, [&](int64_t i0, int64_t i1) {
#pragma omp simd
        for (int64_t i = i0; i < i1; ++i) {
            const float gi = g[i] * a.grad_scale;
            const float mi = b1 * m[i] + c1 * gi;
            const float vi = b2 * v[i] + c2 * gi * gi;
            m[i] = mi;
            v[i] = vi;
            const float denom = std::sqrt(vi) * inv_sqrt_bc2 + a.eps;
            p[i] = p[i] * decay - step * mi / denom;
        }
    });
}

double mse(const float* y, const float* target, int64_t n, float scale, float* dy) {
    return chunkedSum(n, [&](int64_t i0, int64_t i1) {
        double s = 0;
        for (int64_t i = i0; i < i1; ++i) {
            const float e = y[i] - target[i];
            dy[i] = scale * 2.f * e;
            s += static_cast<double>(e) * e;
        }
        return s;
    });
}

void crossEntropy(const float* logits, int64_t rows, int vocab, const int32_t* targets, int ignore_index, float scale,
                  float* loss, float* correct, float* dlogits) {
    pool().parallelFor(rows, kMinParallelWork / std::max(1, vocab), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* l = logits + r * vocab;
            float* dl = dlogits ? dlogits + r * vocab : nullptr;
            const int target = targets[r];
            if (target == ignore_index) {
                loss[r] = 0.f;
                correct[r] = 0.f;
                if (dl) std::fill(dl, dl + vocab, 0.f);
                continue;
            }
            int best = 0;
            for (int k = 1; k < vocab; ++k)
                if (l[k] > l[best]) best = k;
            const float mx = l[best];
            float sum = 0.f;
#pragma omp simd reduction(+ : sum)
            for (int k = 0; k < vocab; ++k) sum += fastExp(l[k] - mx);
            loss[r] = std::log(sum) + mx - l[target];
            correct[r] = best == target ? 1.f : 0.f;
            if (dl) {
                const float inv = scale / sum;
#pragma omp simd
                for (int k = 0; k < vocab; ++k) dl[k] = fastExp(l[k] - mx) * inv;
                dl[target] -= scale;
            }
        }
    });
}

}  // namespace mamba::cpu
