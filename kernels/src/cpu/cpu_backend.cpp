// CPU backend: memory, capabilities and the inference stages other than products and the scan
// (rmsnorm, embed, negExp, low-precision conversion, conv + SiLU). See cpu_backend.h for the file map.
#include "cpu_backend.h"

#include "core/backends.h"
#include "core/errors.h"
#include "fast_math.h"
#include "lowp.h"
#include "thread_pool.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

namespace mamba::cpu {

Capabilities CpuBackend::capabilities() const {
    Capabilities c;
    c.host = true;
    c.training = true;
    c.graphs = false;
    c.lowp_storage = true;  // BF16/F16 matrices widened in the product kernels; TF32 storage = exact f32 products
    return c;
}

// ---- memory ----

float* CpuBackend::alloc(int64_t n) {
    if (n < 0) fail("alloc: n = " + std::to_string(n) + " must be >= 0");
    constexpr int64_t kMax = (std::numeric_limits<int64_t>::max() - 63) / static_cast<int64_t>(sizeof(float));
    if (n > kMax) throw OutOfMemoryError("host allocation of " + std::to_string(n) + " floats is too large");
    const size_t bytes = std::max<size_t>(64, (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64);
    void* p = std::aligned_alloc(64, bytes);
    if (!p) throw OutOfMemoryError("host allocation of " + std::to_string(bytes) + " bytes failed");
    std::memset(p, 0, bytes);
    return static_cast<float*>(p);
}

void CpuBackend::release(float* p) noexcept { std::free(p); }

void CpuBackend::upload(float* dst, const float* host, int64_t n) { copy(dst, host, n); }

void CpuBackend::download(float* host, const float* src, int64_t n) { copy(host, src, n); }

void CpuBackend::copy(float* dst, const float* src, int64_t n) {
    if (n > 0 && dst != src) std::memmove(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void CpuBackend::zero(float* p, int64_t n) {
    if (n > 0) std::memset(p, 0, static_cast<size_t>(n) * sizeof(float));
}

float* scratch(int slot, int64_t n) {
    thread_local std::vector<float> bufs[4];
    std::vector<float>& v = bufs[slot];
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
    return v.data();
}

float* workerScratch(int slot, int64_t n) {
    thread_local std::vector<float> bufs[8];
    std::vector<float>& v = bufs[slot];
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
    return v.data();
}

// ---- inference stages ----

void CpuBackend::rmsnorm(const RmsNormArgs& a) {
    checkRmsNormOutputs(a);
    const int d = a.d;
    parallelFor(a.rows, kMinParallelWork / std::max(1, d), [&](int64_t r0, int64_t r1) {
        std::vector<float> row(a.y ? 0 : d);  // y16: the row in f32, then rounded
        for (int64_t r = r0; r < r1; ++r) {
            const float* xr = a.x + r * a.ldx;
            float* yr = a.y ? a.y + r * a.ldy : row.data();
            float ss = 0.f;
#pragma omp simd reduction(+ : ss)
            for (int j = 0; j < d; ++j) ss += xr[j] * xr[j];
            const float scale = 1.f / std::sqrt(ss / static_cast<float>(d) + a.eps);
#pragma omp simd
            for (int j = 0; j < d; ++j) yr[j] = a.w[j] * (xr[j] * scale);
            if (!a.y) narrowFromF32(row.data(), a.y16.dtype == DTYPE_F16, static_cast<uint16_t*>(a.y16.data) + r * a.y16.ld, d);
        }
    });
}

namespace {

void requireLowpDtype(const char* what, int dtype) {
    if (dtype != DTYPE_BF16 && dtype != DTYPE_F16)
        fail(std::string(what) + ": dtype " + std::to_string(dtype) + " must be DTYPE_BF16 or DTYPE_F16");
}

void lowpToF32(const uint16_t* src, int dtype, float* dst, int64_t n) { widenToF32(src, dtype == DTYPE_F16, dst, n); }

}  // namespace

void CpuBackend::embed(const Matrix& table, const int32_t* ids, int64_t rows, float* out) {
    const int64_t d = table.in;
    if (table.dtype == DTYPE_F32 || table.dtype == DTYPE_TF32) {  // TF32: f32 values
        if (table.f32 == nullptr) fail("embed: the table has no f32 values");
        for (int64_t r = 0; r < rows; ++r)
            std::memcpy(out + r * d, table.f32 + static_cast<int64_t>(ids[r]) * d, static_cast<size_t>(d) * sizeof(float));
        return;
    }
    requireLowpDtype("embed", table.dtype);
    if (table.lowp == nullptr) fail("embed: the table has no 2-byte values");
    const auto* t = static_cast<const uint16_t*>(table.lowp);
    for (int64_t r = 0; r < rows; ++r) lowpToF32(t + static_cast<int64_t>(ids[r]) * d, table.dtype, out + r * d, d);
}

void CpuBackend::negExp(const float* a_log, float* a, int64_t n) {
    for (int64_t i = 0; i < n; ++i) a[i] = -std::exp(a_log[i]);
}

void CpuBackend::toLowPrecision(const float* src, void* dst, int64_t n, int dtype) {
    requireLowpDtype("toLowPrecision", dtype);
    narrowFromF32(src, dtype == DTYPE_F16, static_cast<uint16_t*>(dst), n);
}

void CpuBackend::fromLowPrecision(const void* src, int dtype, float* dst, int64_t n) {
    requireLowpDtype("fromLowPrecision", dtype);
    lowpToF32(static_cast<const uint16_t*>(src), dtype, dst, n);
}

void CpuBackend::convSilu(const ConvArgs& c) {
    // Messages are built only on failure (here and in every op): these checks run on every decode step.
    if (c.width < 1 || c.width > 8) fail("convSilu: width = " + std::to_string(c.width) + " must be in [1, 8]");
    checkConvOutputs(c);
    const int K = c.width, H = K - 1;
    const int blocks = (c.channels + kChannelBlock - 1) / kChannelBlock;
    const int64_t work = static_cast<int64_t>(c.batch) * c.steps * c.channels;
    parallelFor(static_cast<int64_t>(c.batch) * blocks, work > kMinParallelWork ? 1 : 1 << 30,
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
                for (int j = 0; j < nd; ++j) ur[j] = silu(acc[j]);
                if (c.u16.data)
                    narrowFromF32(ur, c.u16.dtype == DTYPE_F16,
                                  static_cast<uint16_t*>(c.u16.data) + (row0 + t) * c.u16.ld + d0, nd);
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

}  // namespace mamba::cpu

namespace mamba {

std::shared_ptr<Ops> cpuBackend() {
    // Stateless and shared; never destroyed, so a model closed during process exit still finds it.
    static const std::shared_ptr<Ops>* backend = new std::shared_ptr<Ops>(std::make_shared<cpu::CpuBackend>());
    return *backend;
}

}  // namespace mamba
