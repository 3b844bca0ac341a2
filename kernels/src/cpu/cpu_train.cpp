// CPU training stages other than products (cpu_gemm.cpp) and the scan (cpu_scan.cpp): the rmsnorm and
// conv backward, the optimiser step and the losses. Every reduction over rows, steps or blocks runs in a
// fixed order (per-task partials combined afterwards in task order), so results do not depend on the
// thread count.
#include "cpu_backend.h"
#include "ops/optimizer_control.h"

#include "core/errors.h"
#include "fast_math.h"
#include "lowp.h"
#include "thread_pool.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace mamba::cpu {
namespace {

// Fixed chunk of elementwise reductions: partial sums per chunk, then summed in chunk order.
constexpr int64_t kReduceChunk = 1 << 14;

inline float dsilu(float x) {
    const float s = sigmoid(x);
    return s * (1.f + x * (1.f - s));
}

/** Deterministic Σ f(i0, i1) over [0, n): fixed chunks summed in double, chunk partials added in order. */
template <class F>
double chunkedSum(int64_t n, F f) {
    if (n <= 0) return 0.0;
    const int64_t chunks = (n + kReduceChunk - 1) / kReduceChunk;
    std::vector<double> part(static_cast<size_t>(chunks), 0.0);
    parallelFor(chunks, n > 4 * kReduceChunk ? 1 : 1 << 30, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) part[c] = f(c * kReduceChunk, std::min(n, (c + 1) * kReduceChunk));
    });
    double s = 0;
    for (double v : part) s += v;
    return s;
}

}  // namespace

void CpuBackend::rmsnormBackward(const RmsNormBackwardArgs& a) {
    const int d = a.d;
    const int64_t rows = a.rows;
    float* rstd = scratch(3, rows);
    // Per row: ρ = 1/rms, x̂ = ρ·x, g = w ⊙ dy; dx = ρ·(g − x̂·mean(g ⊙ x̂)).
    parallelFor(rows, kMinParallelWork / std::max(1, d), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* xr = a.x + r * a.ldx;
            const float* gr = a.dy + r * a.lddy;
            float* out = a.dx + r * a.lddx;
            float ss = 0.f;
#pragma omp simd reduction(+ : ss)
            for (int j = 0; j < d; ++j) ss += xr[j] * xr[j];
            const float rho = 1.f / std::sqrt(ss / static_cast<float>(d) + a.eps);
            rstd[r] = rho;
            float dot = 0.f;
#pragma omp simd reduction(+ : dot)
            for (int j = 0; j < d; ++j) dot += a.w[j] * gr[j] * xr[j];
            const float c = dot * rho * rho / static_cast<float>(d);  // mean(g ⊙ x̂) / ρ … times x̂ = c·x·ρ
            if (a.beta == 0.f) {
#pragma omp simd
                for (int j = 0; j < d; ++j) out[j] = rho * (a.w[j] * gr[j] - c * xr[j]);
            } else {
                const float beta = a.beta;
#pragma omp simd
                for (int j = 0; j < d; ++j) out[j] = beta * out[j] + rho * (a.w[j] * gr[j] - c * xr[j]);
            }
        }
    });
    // dw[j] += Σ_r dy[r, j]·x[r, j]·ρ_r, rows in order, parallel over column blocks.
    const int blocks = (d + kChannelBlock - 1) / kChannelBlock;
    parallelFor(blocks, rows * d > kMinParallelWork ? 1 : 1 << 30, [&](int64_t b0, int64_t b1) {
        for (int64_t blk = b0; blk < b1; ++blk) {
            const int j0 = static_cast<int>(blk) * kChannelBlock, nj = std::min(kChannelBlock, d - j0);
            float s[kChannelBlock] = {};
            for (int64_t r = 0; r < rows; ++r) {
                const float* xr = a.x + r * a.ldx + j0;
                const float* gr = a.dy + r * a.lddy + j0;
                const float rho = rstd[r];
#pragma omp simd
                for (int j = 0; j < nj; ++j) s[j] += gr[j] * (xr[j] * rho);
            }
            for (int j = 0; j < nj; ++j) a.dw[j0 + j] += s[j];
        }
    });
}

void CpuBackend::convSiluBackward(const ConvBackwardArgs& c) {
    if (c.width < 1 || c.width > 8)
        fail("convSiluBackward: width = " + std::to_string(c.width) + " must be in [1, 8]");
    checkConvBackwardOutputs(c);
    const int K = c.width, H = K - 1, T = c.steps, C = c.channels;
    const int blocks = (C + kChannelBlock - 1) / kChannelBlock;
    // Per-row partial weight gradients, summed over rows in row order afterwards.
    float* pdw = scratch(0, static_cast<int64_t>(c.batch) * C * K);
    float* pdb = scratch(1, static_cast<int64_t>(c.batch) * C);
    const int64_t work = static_cast<int64_t>(c.batch) * T * C * K;
    parallelFor(static_cast<int64_t>(c.batch) * blocks, work > kMinParallelWork ? 1 : 1 << 30,
                [&](int64_t t0, int64_t t1) {
        float* dcbuf = workerScratch(0, static_cast<int64_t>(T) * kChannelBlock);
        for (int64_t task = t0; task < t1; ++task) {
            const int b = static_cast<int>(task / blocks);
            const int d0 = static_cast<int>(task % blocks) * kChannelBlock;
            const int nd = std::min(kChannelBlock, C - d0);
            const float* hist = c.history + b * c.history_stride;
            const int64_t row0 = static_cast<int64_t>(b) * T;
            float wt[8 * kChannelBlock];  // this block's taps transposed to [k][j] (width ≤ 8, checked above)
            for (int j = 0; j < nd; ++j)
                for (int k = 0; k < K; ++k) wt[k * kChannelBlock + j] = c.w[static_cast<int64_t>(d0 + j) * K + k];
            float gw[8 * kChannelBlock] = {}, gb[kChannelBlock] = {};
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
                float acc[kChannelBlock];
#pragma omp simd
                for (int j = 0; j < nd; ++j) acc[j] = c.bias[d0 + j];
                for (int k = 0; k < K; ++k) {
                    const float* sk = src[k];
                    const int64_t st = stride[k];
#pragma omp simd
                    for (int j = 0; j < nd; ++j) acc[j] += wt[k * kChannelBlock + j] * sk[j * st];
                }
                const float* dur = c.du + (row0 + t) * c.ldu + d0;
                float* dc = dcbuf + static_cast<int64_t>(t) * kChannelBlock;
#pragma omp simd
                for (int j = 0; j < nd; ++j) {
                    dc[j] = dur[j] * dsilu(acc[j]);
                    gb[j] += dc[j];
                }
                for (int k = 0; k < K; ++k) {
                    const float* sk = src[k];
                    const int64_t st = stride[k];
#pragma omp simd
                    for (int j = 0; j < nd; ++j) gw[k * kChannelBlock + j] += dc[j] * sk[j * st];
                }
            }
            // dx_s = Σ_k w[k]·dc_{s+H-k} over taps whose output step lies inside [0, T). Inputs s < 0 are the
            // starting history (slot H + s); the history after the last step holds the inputs s ≥ T − H, so its
            // gradient (when carried on) adds to theirs.
            const float* dend = c.dhistory_end ? c.dhistory_end + b * c.dhistory_stride + static_cast<int64_t>(d0) * H : nullptr;
            float* dhist = c.dhistory ? c.dhistory + b * c.dhistory_stride + static_cast<int64_t>(d0) * H : nullptr;
            for (int s = dhist ? -H : 0; s < T; ++s) {
                float acc[kChannelBlock] = {};
                for (int k = 0; k < K; ++k) {
                    const int t = s + H - k;
                    if (t < 0 || t >= T) continue;
                    const float* dc = dcbuf + static_cast<int64_t>(t) * kChannelBlock;
#pragma omp simd
                    for (int j = 0; j < nd; ++j) acc[j] += wt[k * kChannelBlock + j] * dc[j];
                }
                const int e = s - (T - H);  // slot of the end history holding input s
                if (dend && e >= 0)
                    for (int j = 0; j < nd; ++j) acc[j] += dend[static_cast<int64_t>(j) * H + e];
                if (s >= 0 && c.dx)
                    std::copy(acc, acc + nd, c.dx + (row0 + s) * c.lddx + d0);
                else if (s >= 0)
                    narrowFromF32(acc, c.dx16.dtype == DTYPE_F16,
                                  static_cast<uint16_t*>(c.dx16.data) + (row0 + s) * c.dx16.ld + d0, nd);
                else
                    for (int j = 0; j < nd; ++j) dhist[static_cast<int64_t>(j) * H + H + s] = acc[j];
            }
            float* pw = pdw + (static_cast<int64_t>(b) * C + d0) * K;
            for (int j = 0; j < nd; ++j)
                for (int k = 0; k < K; ++k) pw[j * K + k] = gw[k * kChannelBlock + j];
            std::copy(gb, gb + nd, pdb + static_cast<int64_t>(b) * C + d0);
        }
    });
    parallelFor(C, kMinParallelWork / std::max(1, c.batch * K), [&](int64_t e0, int64_t e1) {
        for (int64_t d = e0; d < e1; ++d) {
            for (int b = 0; b < c.batch; ++b) {
                const float* pw = pdw + (static_cast<int64_t>(b) * C + d) * K;
                for (int k = 0; k < K; ++k) c.dw[d * K + k] += pw[k];
                c.dbias[d] += pdb[static_cast<int64_t>(b) * C + d];
            }
        }
    });
}

void CpuBackend::scale(float* x, int64_t n, float s) {
    parallelFor(n, kMinParallelWork * 4, [&](int64_t i0, int64_t i1) {
#pragma omp simd
        for (int64_t i = i0; i < i1; ++i) x[i] *= s;
    });
}

void CpuBackend::sumInto(const float* x, int64_t n, bool squares, double* out) {
    *out = chunkedSum(n, [&](int64_t i0, int64_t i1) {
        double s = 0;
        for (int64_t i = i0; i < i1; ++i) {
            const double v = x[i];
            s += squares ? v * v : v;
        }
        return s;
    });
}

void CpuBackend::optimizerControl(const OptimizerControlArgs& a) {
    decideOptimizerStep(a);
}

void CpuBackend::adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWFactors* f, bool decayed) {
    if (f->skip != 0.f) return;
    const float decay = f->decay[decayed ? 0 : 1];
    const float step = f->step;
    const float inv_sqrt_bc2 = f->inv_sqrt_bc2;
    const float b1 = f->beta1, b2 = f->beta2, c1 = f->c1, c2 = f->c2;
    const float gs = f->grad_scale, eps = f->eps;
    parallelFor(n, kMinParallelWork * 4, [&](int64_t i0, int64_t i1) {
#pragma omp simd
        for (int64_t i = i0; i < i1; ++i) {
            const float gi = g[i] * gs;
            const float mi = b1 * m[i] + c1 * gi;
            const float vi = b2 * v[i] + c2 * gi * gi;
            m[i] = mi;
            v[i] = vi;
            const float denom = std::sqrt(vi) * inv_sqrt_bc2 + eps;
            p[i] = p[i] * decay - step * mi / denom;
        }
    });
}

void CpuBackend::mse(const float* y, const float* target, int64_t n, float scale, float* dy, double* out) {
    *out = chunkedSum(n, [&](int64_t i0, int64_t i1) {
        double s = 0;
        for (int64_t i = i0; i < i1; ++i) {
            const float e = y[i] - target[i];
            dy[i] = scale * 2.f * e;
            s += static_cast<double>(e) * e;
        }
        return s;
    });
}

void CpuBackend::crossEntropy(const CrossEntropyArgs& a) {
    const int vocab = a.vocab;
    if (vocab < 1) fail("crossEntropy: vocab = " + std::to_string(vocab) + " must be >= 1");
    checkCrossEntropyGrad(a);
    // Out-of-range targets would read outside the row: reject them before touching any output.
    for (int64_t r = 0; r < a.rows; ++r) {
        const int t = a.targets[r];
        if (t != a.ignore_index && (t < 0 || t >= vocab))
            fail("crossEntropy: target " + std::to_string(t) + " at row " + std::to_string(r) + " is outside [0, " +
                 std::to_string(vocab) + ") and is not ignore_index (" + std::to_string(a.ignore_index) + ")");
    }
    parallelFor(a.rows, kMinParallelWork / std::max(1, vocab), [&](int64_t r0, int64_t r1) {
        std::vector<float> row;  // a row's f32 gradient before it is rounded (dlogits16)
        for (int64_t r = r0; r < r1; ++r) {
            const float* l = a.logits + r * vocab;
            float* dl = a.dlogits ? a.dlogits + r * vocab : nullptr;
            uint16_t* dl16 = a.dlogits16 ? static_cast<uint16_t*>(a.dlogits16) + r * a.ld16 : nullptr;
            const int target = a.targets[r];
            if (target == a.ignore_index) {
                a.loss[r] = 0.f;
                a.correct[r] = 0.f;
                if (dl) std::fill(dl, dl + vocab, 0.f);
                if (dl16) std::fill(dl16, dl16 + vocab, uint16_t{0});
                continue;
            }
            int best = 0;
            for (int k = 1; k < vocab; ++k)
                if (l[k] > l[best]) best = k;
            const float mx = l[best];
            float sum = 0.f;
#pragma omp simd reduction(+ : sum)
            for (int k = 0; k < vocab; ++k) sum += fastExp(l[k] - mx);
            a.loss[r] = std::log(sum) + mx - l[target];
            a.correct[r] = best == target ? 1.f : 0.f;
            // the f32 gradient, into dl or (for dlogits16, which may alias the row) a temporary, then rounded
            float* g = dl;
            if (dl16) {
                row.resize(static_cast<size_t>(vocab));
                g = row.data();
            }
            if (g) {
                const float inv = a.scale / sum;
#pragma omp simd
                for (int k = 0; k < vocab; ++k) g[k] = fastExp(l[k] - mx) * inv;
                g[target] -= a.scale;
            }
            if (dl16) narrowFromF32(g, a.dtype16 == DTYPE_F16, dl16, vocab);
        }
    });
}

}  // namespace mamba::cpu

namespace mamba::cpu {

void CpuBackend::embedBackward(const EmbedBackwardArgs& a) {
    if (a.rows <= 0 || a.d <= 0) return;
    for (int64_t r = 0; r < a.rows; ++r)  // an id outside the table would write outside it
        if (a.ids[r] < 0 || a.ids[r] >= a.vocab)
            fail("embedBackward: id " + std::to_string(a.ids[r]) + " at row " + std::to_string(r) + " is outside [0, " +
                 std::to_string(a.vocab) + ")");
    // The rows grouped by id, each group in row order (a stable sort of row indices), then one task per group:
    // a table row receives its rows in increasing r, exactly as the plain loop, whatever the thread count.
    std::vector<int64_t> order(static_cast<size_t>(a.rows));
    for (int64_t r = 0; r < a.rows; ++r) order[r] = r;
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return a.ids[x] < a.ids[y]; });
    std::vector<int64_t> group;  // start of each group in `order`, then rows
    for (int64_t i = 0; i < a.rows; ++i)
        if (i == 0 || a.ids[order[i]] != a.ids[order[i - 1]]) group.push_back(i);
    group.push_back(a.rows);
    const int d = a.d;
    const int64_t groups = static_cast<int64_t>(group.size()) - 1;
    parallelFor(groups, std::max<int64_t>(1, kMinParallelWork / (d * std::max<int64_t>(1, a.rows / groups))),
                [&](int64_t g0, int64_t g1) {
                    for (int64_t g = g0; g < g1; ++g) {
                        float* dst = a.dtable + static_cast<int64_t>(a.ids[order[group[g]]]) * d;
                        for (int64_t i = group[g]; i < group[g + 1]; ++i) {
                            const float* src = a.dx + order[i] * a.ldx;
#pragma omp simd
                            for (int j = 0; j < d; ++j) dst[j] += src[j];
                        }
                    }
                });
}

}  // namespace mamba::cpu
