// CPU backend: OpenBLAS for the products, our vectorised loops for the fused stages.
// Work is split over (batch row, channel block) so results do not depend on the thread count.
#include "../common/backend.h"
#include "../common/errors.h"
#include "fast_math.h"
#include "thread_pool.h"

#include <cblas.h>

#include <cmath>
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
                    float* ur = c.u + (row0 + t) * c.ldu;
#pragma omp simd
                    for (int j = 0; j < nd; ++j) {
                        const int d = d0 + j;
                        float acc = c.bias[d];
                        for (int k = 0; k < K; ++k) {
                            const int src = t - H + k;  // time of the input this tap multiplies
                            const float v = src >= 0 ? c.x[(row0 + src) * c.ldx + d] : hist[d * H + H + src];
                            acc += c.w[d * K + k] * v;
                        }
                        ur[d] = cpu::silu(acc);
                    }
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
                    for (int j = 0; j < nd; ++j) {
                        const int d = d0 + j;
                        float* hd = h + static_cast<int64_t>(d) * N;
                        const float* ad = s.a + static_cast<int64_t>(d) * N;
                        const float dj = delta[j], du = dj * u[j];
                        float acc = 0.f;
#pragma omp simd reduction(+ : acc)
                        for (int n = 0; n < N; ++n) {
                            const float hn = cpu::fastExp(dj * ad[n]) * hd[n] + du * Bt[n];
                            hd[n] = hn;
                            acc += hn * Ct[n];
                        }
                        y[j] = acc;
                    }
                    float* out = s.out + r * s.channels + d0;
#pragma omp simd
                    for (int j = 0; j < nd; ++j) out[j] = (y[j] + s.d_skip[d0 + j] * u[j]) * cpu::silu(z[j]);
                }
            }
        });
    }
};

}  // namespace

Backend& cpuBackend() {
    static CpuBackend backend;
    return backend;
}

}  // namespace mamba
