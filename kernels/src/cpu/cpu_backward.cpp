// CPU backward stages for training (see cpu_backward.h). Products go to OpenBLAS (the weight gradients
// are one sgemm over all B·T rows, so their summation order is OpenBLAS's for that shape, independent of
// our thread count); the fused stages are our loops, split over (batch row, channel block) tasks whose
// partial sums are combined afterwards in a fixed order.
#include "cpu_backward.h"

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
// Steps of the scan recomputed at once in backward (bounds the per-task buffers).
constexpr int kScanChunk = 64;
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

void linearBackward(const float* dy, int64_t lddy, int64_t rows, const Matrix& w, float* dx, int64_t lddx,
                    float beta) {
    // dx[rows, in] = beta·dx + dy[rows, out] · W[out, in]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), w.in, w.out, 1.f, dy,
                static_cast<int>(lddy), w.f32, w.in, beta, dx, static_cast<int>(lddx));
}

void linearWeightGrad(const float* dy, int64_t lddy, const float* x, int64_t ldx, int64_t rows, int out, int in,
                      float* dw, float* dbias) {
    // dw[out, in] += dy[rows, out]ᵀ · x[rows, in]: one product over every row.
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, static_cast<int>(rows), 1.f, dy,
                static_cast<int>(lddy), x, static_cast<int>(ldx), 1.f, dw, in);
    if (dbias) columnSums(dy, lddy, rows, out, dbias);
}

void rmsnormBackward(const float* x, int64_t ldx, const float* w, const float* dy, int64_t lddy, int64_t rows, int d,
                     float eps, float* dx, int64_t lddx, float beta, float* dw) {
    std::vector<float> rstd(static_cast<size_t>(rows));
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
    std::vector<float> pdw(static_cast<size_t>(c.batch) * C * K), pdb(static_cast<size_t>(c.batch) * C);
    const int64_t work = static_cast<int64_t>(c.batch) * T * C * K;
    pool().parallelFor(static_cast<int64_t>(c.batch) * blocks, work > kMinParallelWork ? 1 : 1 << 30,
                       [&](int64_t t0, int64_t t1) {
        std::vector<float> dcbuf(static_cast<size_t>(T) * kBlock);
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
                float* dc = dcbuf.data() + static_cast<int64_t>(t) * kBlock;
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
                    const float* dc = dcbuf.data() + static_cast<int64_t>(t) * kBlock;
#pragma omp simd
                    for (int j = 0; j < nd; ++j) acc[j] += wt[k * kBlock + j] * dc[j];
                }
                std::copy(acc, acc + nd, c.dx + (row0 + s) * c.lddx + d0);
            }
            float* pw = pdw.data() + (static_cast<int64_t>(b) * C + d0) * K;
            for (int j = 0; j < nd; ++j)
                for (int k = 0; k < K; ++k) pw[j * K + k] = gw[k * kBlock + j];
            std::copy(gb, gb + nd, pdb.data() + static_cast<int64_t>(b) * C + d0);
        }
    });
    pool().parallelFor(C, kMinParallelWork / std::max(1, c.batch * K), [&](int64_t e0, int64_t e1) {
        for (int64_t d = e0; d < e1; ++d) {
            for (int b = 0; b < c.batch; ++b) {
                const float* pw = pdw.data() + (static_cast<int64_t>(b) * C + d) * K;
                for (int k = 0; k < K; ++k) c.dw[d * K + k] += pw[k];
                c.dbias[d] += pdb[static_cast<int64_t>(b) * C + d];
            }
        }
    });
}

void selectiveScanBackward(const ScanBackwardArgs& s) {
    const int N = s.d_state, T = s.steps, C = s.channels;
    const int blocks = (C + kBlock - 1) / kBlock;
    const int64_t R = static_cast<int64_t>(s.batch) * T;
    const int chunks = (T + kScanChunk - 1) / kScanChunk;
    // dB_t, dC_t sum over channels: one partial per channel block, added in block order afterwards.
    std::vector<float> pbc(static_cast<size_t>(blocks) * R * 2 * N);
    // dA, dD sum over rows: one partial per row, added in row order afterwards.
    std::vector<float> pda(static_cast<size_t>(s.batch) * C * N), pdd(static_cast<size_t>(s.batch) * C);
    const int64_t work = R * C * N / 2;
    pool().parallelFor(static_cast<int64_t>(s.batch) * blocks, work > kMinParallelWork ? 1 : 1 << 30,
                       [&](int64_t t0, int64_t t1) {
        const int64_t slab = static_cast<int64_t>(kBlock) * N;  // one step's state for a channel block
        std::vector<float> bounds(static_cast<size_t>(chunks) * slab);  // h before each chunk
        std::vector<float> hs(static_cast<size_t>(kScanChunk + 1) * slab);  // h_{t0-1} .. h_{t1-1}
        std::vector<float> abar(static_cast<size_t>(kScanChunk) * slab);
        std::vector<float> G(slab), gA(slab);
        float delta[kBlock], gD[kBlock];
        for (int64_t task = t0; task < t1; ++task) {
            const int b = static_cast<int>(task / blocks);
            const int blk = static_cast<int>(task % blocks);
            const int d0 = blk * kBlock;
            const int nd = std::min(kBlock, C - d0);
            const int64_t row0 = static_cast<int64_t>(b) * T;
            const float* A = s.a + static_cast<int64_t>(d0) * N;

            // Recomputes h over steps [ta, tb) from h_prev (slab), writing h_t to out + (t-ta)·slab and,
            // when ab is not null, exp(Δ·A) to ab + (t-ta)·slab. The same formula as the forward scan.
            auto recompute = [&](int ta, int tb, const float* hprev, float* out, float* ab) {
                for (int t = ta; t < tb; ++t) {
                    const int64_t r = row0 + t;
                    const float* dt = s.dt + r * C + d0;
                    const float* u = s.u + r * C + d0;
                    const float* Bt = s.bc + r * s.ldbc;
                    float* hn = out + static_cast<int64_t>(t - ta) * slab;
                    float* an = ab ? ab + static_cast<int64_t>(t - ta) * slab : nullptr;
#pragma omp simd
                    for (int j = 0; j < nd; ++j) delta[j] = softplus(dt[j]);
                    for (int j = 0; j < nd; ++j) {
                        const float dj = delta[j], du = dj * u[j];
                        const float* ad = A + static_cast<int64_t>(j) * N;
                        const float* hp = hprev + static_cast<int64_t>(j) * N;
                        float* hj = hn + static_cast<int64_t>(j) * N;
                        if (an) {
                            float* aj = an + static_cast<int64_t>(j) * N;
#pragma omp simd
                            for (int n = 0; n < N; ++n) {
                                const float e = fastExp(dj * ad[n]);
                                aj[n] = e;
                                hj[n] = e * hp[n] + du * Bt[n];
                            }
                        } else {
#pragma omp simd
                            for (int n = 0; n < N; ++n) hj[n] = fastExp(dj * ad[n]) * hp[n] + du * Bt[n];
                        }
                    }
                    hprev = hn;
                }
            };

            // Pass 1: the state at the start of every chunk, from the starting h.
            const float* h0 = s.h0 + b * s.h0_stride + static_cast<int64_t>(d0) * N;
            for (int j = 0; j < nd; ++j)
                std::copy(h0 + static_cast<int64_t>(j) * N, h0 + static_cast<int64_t>(j + 1) * N,
                          bounds.data() + static_cast<int64_t>(j) * N);
            for (int c = 0; c + 1 < chunks; ++c) {
                const int ta = c * kScanChunk;
                // Runs the chunk through hs, then keeps only its last state.
                recompute(ta, ta + kScanChunk, bounds.data() + c * slab, hs.data(), nullptr);
                std::copy(hs.data() + (kScanChunk - 1) * slab, hs.data() + kScanChunk * slab,
                          bounds.data() + (c + 1) * slab);
            }

            // Pass 2: chunks in reverse; recompute each chunk's states, then walk it backwards.
            std::fill(G.begin(), G.end(), 0.f);
            std::fill(gA.begin(), gA.end(), 0.f);
            std::fill(gD, gD + kBlock, 0.f);
            for (int c = chunks - 1; c >= 0; --c) {
                const int ta = c * kScanChunk, tb = std::min(T, ta + kScanChunk);
                std::copy(bounds.data() + c * slab, bounds.data() + (c + 1) * slab, hs.data());
                recompute(ta, tb, hs.data(), hs.data() + slab, abar.data());
                for (int t = tb - 1; t >= ta; --t) {
                    const int64_t r = row0 + t;
                    const float* dt = s.dt + r * C + d0;
                    const float* u = s.u + r * C + d0;
                    const float* z = s.z + r * s.ldz + d0;
                    const float* dout = s.dout + r * C + d0;
                    const float* Bt = s.bc + r * s.ldbc;
                    const float* Ct = Bt + N;
                    const float* hcur = hs.data() + static_cast<int64_t>(t - ta + 1) * slab;
                    const float* hprev = hs.data() + static_cast<int64_t>(t - ta) * slab;
                    const float* ab = abar.data() + static_cast<int64_t>(t - ta) * slab;
                    float* ddt = s.ddt + r * C + d0;
                    float* du_out = s.du + r * C + d0;
                    float* dz = s.dz + r * s.lddz + d0;
                    float gB[256], gC[256];  // d_state ≤ 256 (validated)
                    std::fill(gB, gB + N, 0.f);
                    std::fill(gC, gC + N, 0.f);
                    for (int j = 0; j < nd; ++j) {
                        const int64_t jn = static_cast<int64_t>(j) * N;
                        const float dtp = dt[j];
                        const float dj = softplus(dtp);
                        const float uj = u[j], Dj = s.d_skip[d0 + j];
                        const float* hc = hcur + jn;
                        const float* hp = hprev + jn;
                        const float* aj = ab + jn;
                        const float* ad = A + jn;
                        float* g = G.data() + jn;
                        float* ga = gA.data() + jn;
                        // Output and gate: y = Σ h·C + D·u, out = y·SiLU(z).
                        float yv = 0.f;
#pragma omp simd reduction(+ : yv)
                        for (int n = 0; n < N; ++n) yv += hc[n] * Ct[n];
                        yv += Dj * uj;
                        const float zj = z[j], sz = sigmoid(zj);
                        const float dy = dout[j] * (zj * sz);
                        dz[j] = dout[j] * yv * (sz * (1.f + zj * (1.f - sz)));
                        gD[j] += dy * uj;
                        const float du = dj * uj;
                        float sGB = 0.f, sDelta = 0.f;
#pragma omp simd reduction(+ : sGB, sDelta)
                        for (int n = 0; n < N; ++n) {
                            const float gn = g[n] + dy * Ct[n];  // ∂L/∂h_t
                            gC[n] += dy * hc[n];
                            gB[n] += gn * du;
                            sGB += gn * Bt[n];
                            const float gah = gn * aj[n] * hp[n];
                            sDelta += gah * ad[n] + gn * Bt[n] * uj;
                            ga[n] += gah * dj;
                            g[n] = gn * aj[n];  // carry to h_{t-1}
                        }
                        du_out[j] = Dj * dy + dj * sGB;
                        const float sp = dtp > 20.f ? 1.f : sigmoid(dtp);  // softplus'
                        ddt[j] = sDelta * sp;
                    }
                    float* pb = pbc.data() + (static_cast<int64_t>(blk) * R + r) * 2 * N;
                    std::copy(gB, gB + N, pb);
                    std::copy(gC, gC + N, pb + N);
                }
            }
            float* pa = pda.data() + (static_cast<int64_t>(b) * C + d0) * N;
            std::copy(gA.begin(), gA.begin() + static_cast<int64_t>(nd) * N, pa);
            std::copy(gD, gD + nd, pdd.data() + static_cast<int64_t>(b) * C + d0);
        }
    });
    // dB, dC: sum the channel blocks in block order.
    pool().parallelFor(R, kMinParallelWork / std::max(1, blocks * 2 * N), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            float* out = s.dbc + r * s.lddbc;
            const float* p0 = pbc.data() + r * 2 * N;
            std::copy(p0, p0 + 2 * N, out);
            for (int blk = 1; blk < blocks; ++blk) {
                const float* p = pbc.data() + (static_cast<int64_t>(blk) * R + r) * 2 * N;
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
                const float* p = pda.data() + (static_cast<int64_t>(b) * C + d) * N;
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
