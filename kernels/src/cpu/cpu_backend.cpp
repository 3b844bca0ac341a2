// CPU backend: OpenBLAS for the products, our vectorised loops for the fused stages.
// Work is split over (batch row, channel block) so results do not depend on the thread count.
#include "../common/backend.h"
#include "../common/errors.h"
#include "cpu_backward.h"
#include "blas_threads.h"
#include "fast_math.h"
#include "thread_pool.h"

#include <cblas.h>

#include <cmath>
#include <optional>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

namespace mamba {
namespace {

using cpu::pool;

// Channels per task in conv/scan: a multiple of the SIMD width, small enough to balance threads.
constexpr int kChannelBlock = 64;
// Below this many (channel × step) updates a stage runs on the calling thread.
constexpr int64_t kMinParallelWork = 1 << 14;

/**
 * One time step of the SSM for channels [d0, d0+nd): h ← exp(Δ·A)·h + Δ·u·B, y = h·C.
 * FixedN > 0 compiles the state loop for that size (fully unrolled, no remainder), 0 uses n.
 */
template <int FixedN>
inline void scanChannels(const ScanArgs& s, int d0, int nd, int n, const float* delta, const float* u,
                         const float* Bt, const float* Ct, float* h, float* y) {
    const int N = FixedN > 0 ? FixedN : n;
    for (int j = 0; j < nd; ++j) {
        const int64_t d = d0 + j;
        float* hd = h + d * N;
        const float* ad = s.a + d * N;
        const float dj = delta[j], du = dj * u[j];
        float acc = 0.f;
#pragma omp simd reduction(+ : acc)
        for (int k = 0; k < N; ++k) {
            const float hn = cpu::fastExp(dj * ad[k]) * hd[k] + du * Bt[k];
            hd[k] = hn;
            acc += hn * Ct[k];
        }
        y[j] = acc;
    }
}

class CpuBackend final : public Backend {
public:
    bool isHost() const override { return true; }

    float* alloc(int64_t n) override {
        const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
        void* p = std::aligned_alloc(64, bytes);
        if (!p) throw OutOfMemoryError("host allocation of " + std::to_string(bytes) + " bytes failed");
        std::memset(p, 0, bytes);
        return static_cast<float*>(p);
    }
    void release(float* p) noexcept override { std::free(p); }
    void upload(float* dst, const float* src, int64_t n) override { copy(dst, src, n); }
    void download(float* dst, const float* src, int64_t n) override { copy(dst, src, n); }
    void copy(float* dst, const float* src, int64_t n) override {
        if (dst != src) std::memmove(dst, src, static_cast<size_t>(n) * sizeof(float));
    }
    void zero(float* p, int64_t n) override { std::memset(p, 0, static_cast<size_t>(n) * sizeof(float)); }

    void linear(const float* x, int64_t ldx, int64_t rows, const Matrix& w, const float* bias, float* y, int64_t ldy,
                float beta) override {
        if (bias) {  // y = beta*y + bias, then accumulate the product into it
            for (int64_t r = 0; r < rows; ++r) {
                float* yr = y + r * ldy;
                if (beta == 0.f)
                    std::memcpy(yr, bias, static_cast<size_t>(w.out) * sizeof(float));
                else
                    for (int o = 0; o < w.out; ++o) yr[o] = beta * yr[o] + bias[o];
            }
            beta = 1.f;
        }
        // Below ~1M multiply-adds, waking OpenBLAS's threads costs more than the product (41 → 34 µs for
        // the default decode step); large decode products stay threaded to use both memory channels.
        std::optional<cpu::BlasSingleThread> single;
        if (rows * w.out * static_cast<int64_t>(w.in) < (int64_t{1} << 20)) single.emplace();
        if (rows == 1)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, w.out, w.in, 1.f, w.f32, w.in, x, 1, beta, y, 1);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), w.out, w.in, 1.f, x,
                        static_cast<int>(ldx), w.f32, w.in, beta, y, static_cast<int>(ldy));
    }

    void rmsnorm(const float* x, int64_t ldx, const float* w, int64_t rows, int d, float eps, float* y,
                 int64_t ldy) override {
        pool().parallelFor(rows, kMinParallelWork / std::max(1, d), [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
                const float* xr = x + r * ldx;
                float* yr = y + r * ldy;
                float ss = 0.f;
#pragma omp simd reduction(+ : ss)
                for (int j = 0; j < d; ++j) ss += xr[j] * xr[j];
                const float scale = 1.f / std::sqrt(ss / static_cast<float>(d) + eps);
#pragma omp simd
                for (int j = 0; j < d; ++j) yr[j] = w[j] * (xr[j] * scale);
            }
        });
    }

    void embed(const float* table, const int32_t* ids, int64_t rows, int d, float* out) override {
        for (int64_t r = 0; r < rows; ++r)
            std::memcpy(out + r * d, table + static_cast<int64_t>(ids[r]) * d, static_cast<size_t>(d) * sizeof(float));
    }

    void negExp(const float* a_log, float* a, int64_t n) override {
        for (int64_t i = 0; i < n; ++i) a[i] = -std::exp(a_log[i]);
    }

    void convSilu(const ConvArgs& c) override {
        const int K = c.width, H = K - 1;
        const int blocks = (c.channels + kChannelBlock - 1) / kChannelBlock;
        const int64_t work = static_cast<int64_t>(c.batch) * c.steps * c.channels;
        pool().parallelFor(static_cast<int64_t>(c.batch) * blocks, work > kMinParallelWork ? 1 : 1 << 30,
                           [&](int64_t t0, int64_t t1) {
            float next[kChannelBlock * 8];
            for (int64_t task = t0; task < t1; ++task) {
                const int b = static_cast<int>(task / blocks);
                const int d0 = static_cast<int>(task % blocks) * kChannelBlock;
                const int nd = std::min(kChannelBlock, c.channels - d0);
                float* hist = c.history + b * c.history_stride;
                const int64_t row0 = static_cast<int64_t>(b) * c.steps;
                for (int t = 0; t < c.steps; ++t) {
                    float acc[kChannelBlock];
#pragma omp simd
                    for (int j = 0; j < nd; ++j) acc[j] = c.bias[d0 + j];
                    for (int k = 0; k < K; ++k) {
                        const int src = t - H + k;  // time of the input this tap multiplies
                        const float* wk = c.w + static_cast<int64_t>(d0) * K + k;
                        if (src >= 0) {
                            const float* xs = c.x + (row0 + src) * c.ldx + d0;
#pragma omp simd
                            for (int j = 0; j < nd; ++j) acc[j] += wk[j * K] * xs[j];
                        } else {  // before this call: the carried history, [channel, H] oldest first
                            const float* hs = hist + static_cast<int64_t>(d0) * H + H + src;
#pragma omp simd
                            for (int j = 0; j < nd; ++j) acc[j] += wk[j * K] * hs[j * H];
                        }
                    }
                    float* ur = c.u + (row0 + t) * c.ldu + d0;
#pragma omp simd
                    for (int j = 0; j < nd; ++j) ur[j] = cpu::silu(acc[j]);
                }
                // New history: the last H inputs of the window (old history + this call's inputs).
                for (int i = 0; i < H; ++i) {
                    const int src = c.steps - H + i;
                    for (int j = 0; j < nd; ++j) {
                        const int d = d0 + j;
                        next[i * kChannelBlock + j] = src >= 0 ? c.x[(row0 + src) * c.ldx + d] : hist[d * H + H + src];
                    }
                }
                for (int i = 0; i < H; ++i)
                    for (int j = 0; j < nd; ++j) hist[(d0 + j) * H + i] = next[i * kChannelBlock + j];
            }
        });
    }

    void selectiveScan(const ScanArgs& s) override {
        const int N = s.d_state;
        const int blocks = (s.channels + kChannelBlock - 1) / kChannelBlock;
        const int64_t work = static_cast<int64_t>(s.batch) * s.steps * s.channels * N / 4;
        pool().parallelFor(static_cast<int64_t>(s.batch) * blocks, work > kMinParallelWork ? 1 : 1 << 30,
                           [&](int64_t t0, int64_t t1) {
            float delta[kChannelBlock], y[kChannelBlock];
            for (int64_t task = t0; task < t1; ++task) {
                const int b = static_cast<int>(task / blocks);
                const int d0 = static_cast<int>(task % blocks) * kChannelBlock;
                const int nd = std::min(kChannelBlock, s.channels - d0);
                float* h = s.h + b * s.h_stride;
                for (int t = 0; t < s.steps; ++t) {
                    const int64_t r = static_cast<int64_t>(b) * s.steps + t;
                    const float* dt = s.dt + r * s.channels + d0;
                    const float* u = s.u + r * s.channels + d0;
                    const float* z = s.z + r * s.ldz + d0;
                    const float* Bt = s.bc + r * s.ldbc;
                    const float* Ct = Bt + N;
#pragma omp simd
                    for (int j = 0; j < nd; ++j) delta[j] = cpu::softplus(dt[j]);
                    if (N == 16)
                        scanChannels<16>(s, d0, nd, N, delta, u, Bt, Ct, h, y);
                    else
                        scanChannels<0>(s, d0, nd, N, delta, u, Bt, Ct, h, y);
                    float* out = s.out + r * s.channels + d0;
#pragma omp simd
                    for (int j = 0; j < nd; ++j) out[j] = (y[j] + s.d_skip[d0 + j] * u[j]) * cpu::silu(z[j]);
                }
            }
        });
    }

    // ---- training stages: implemented in cpu_backward.cpp ----
    void linearDeterministic(const float* x, int64_t ldx, int64_t rows, const Matrix& w, const float* bias, float* y,
                             int64_t ldy, float beta) override {
        cpu::linearDeterministic(x, ldx, rows, w, bias, y, ldy, beta);
    }
    void linearBackward(const float* dy, int64_t lddy, int64_t rows, const Matrix& w, float* dx, int64_t lddx,
                        float beta) override {
        cpu::linearBackward(dy, lddy, rows, w, dx, lddx, beta);
    }
    void linearWeightGrad(const float* dy, int64_t lddy, const float* x, int64_t ldx, int64_t rows, int out, int in,
                          float* dw, float* dbias) override {
        cpu::linearWeightGrad(dy, lddy, x, ldx, rows, out, in, dw, dbias);
    }
    void rmsnormBackward(const float* x, int64_t ldx, const float* w, const float* dy, int64_t lddy, int64_t rows,
                         int d, float eps, float* dx, int64_t lddx, float beta, float* dw) override {
        cpu::rmsnormBackward(x, ldx, w, dy, lddy, rows, d, eps, dx, lddx, beta, dw);
    }
    void convSiluBackward(const ConvBackwardArgs& args) override { cpu::convSiluBackward(args); }
    void selectiveScanTrain(const ScanArgs& args, float* checkpoints, int chunk) override {
        cpu::selectiveScanTrain(args, checkpoints, chunk);
    }
    void selectiveScanBackward(const ScanBackwardArgs& args) override { cpu::selectiveScanBackward(args); }
    void scale(float* x, int64_t n, float s) override { cpu::scale(x, n, s); }
    double sumOfSquares(const float* x, int64_t n) override { return cpu::sumOfSquares(x, n); }
    void adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWArgs& args) override {
        cpu::adamw(p, g, m, v, n, args);
    }
    double mse(const float* y, const float* target, int64_t n, float scale, float* dy) override {
        return cpu::mse(y, target, n, scale, dy);
    }
    void crossEntropy(const float* logits, int64_t rows, int vocab, const int32_t* targets, int ignore_index,
                      float scale, float* loss, float* correct, float* dlogits) override {
        cpu::crossEntropy(logits, rows, vocab, targets, ignore_index, scale, loss, correct, dlogits);
    }
};

}  // namespace

Backend& cpuBackend() {
    static CpuBackend backend;
    return backend;
}

}  // namespace mamba
