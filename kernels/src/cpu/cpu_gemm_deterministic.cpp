// GEMM_DETERMINISTIC on the CPU: y[r, o] += dot(x[r, :], W[o, :]) where every dot product is computed by
// the same arithmetic whatever the number of rows, the other rows, the tiling or the thread count — so a
// row's output is bit-identical for any batch (batch-invariant) and any CPU thread count.
//
// The fixed order ("8-lane FMA"): lane j accumulates x[k]·w[k] for k ≡ j (mod 8), k ascending, with one FMA
// each (a partial last block is zero-padded, which adds exact zeros); the lanes are then summed as
// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). dotReference() spells that order out in scalar code; the
// vector kernels reproduce it exactly (tests compare them bit for bit). The 4-row × 2-output micro-kernel
// keeps one accumulator per output element, so blocking changes speed, never bits.
#include "cpu_gemm_deterministic.h"

#include "thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

namespace mamba::cpu {

namespace {

/** The lane tree of the fixed order, on a register of 8 lanes. */
inline float laneSum(__m256 acc) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));  // l_i + l_{i+4}
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));                                     // (0+2), (1+3)
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));                            // (0+2) + (1+3)
}

/** The last k % 8 elements, zero-padded to a full register. */
inline __m256 loadTail(const float* p, int n) {
    alignas(32) float buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < n; ++i) buf[i] = p[i];
    return _mm256_load_ps(buf);
}

/** R rows × C outputs of dot products, each element in the fixed order; out[i][j] = dot(x_i, w_j). */
template <int R, int C>
inline void block(const float* const* x, const float* const* w, int K, float (&out)[R][C]) {
    __m256 acc[R][C];
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) acc[i][j] = _mm256_setzero_ps();
    const int K8 = K / 8 * 8;
    for (int k = 0; k < K8; k += 8) {
        __m256 wv[C];
        for (int j = 0; j < C; ++j) wv[j] = _mm256_loadu_ps(w[j] + k);
        for (int i = 0; i < R; ++i) {
            const __m256 xv = _mm256_loadu_ps(x[i] + k);
            for (int j = 0; j < C; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    if (K8 < K) {
        __m256 wv[C];
        for (int j = 0; j < C; ++j) wv[j] = loadTail(w[j] + K8, K - K8);
        for (int i = 0; i < R; ++i) {
            const __m256 xv = loadTail(x[i] + K8, K - K8);
            for (int j = 0; j < C; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) out[i][j] = laneSum(acc[i][j]);
}

// Work split: tasks of kRowTile rows × kOutTile outputs (shape-only constants; the bits never depend on them).
constexpr int kRowTile = 16;
constexpr int kOutTile = 64;

}  // namespace

float dotReference(const float* x, const float* w, int K) {
    float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int k = 0; k < K; ++k) l[k % 8] = std::fma(x[k], w[k], l[k % 8]);
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

void gemmDeterministicAccumulate(const float* x, int64_t ldx, int64_t rows, const float* W, int out, int in, float* y,
                                 int64_t ldy) {
    if (rows <= 0 || out <= 0) return;
    const int64_t rowTasks = (rows + kRowTile - 1) / kRowTile, outTasks = (out + kOutTile - 1) / kOutTile;
    const int64_t work = rows * static_cast<int64_t>(out) * std::max(in, 1);
    parallelFor(rowTasks * outTasks, work >= (int64_t{1} << 18) ? 1 : int64_t{1} << 30, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const int64_t r0 = t / outTasks * kRowTile, o0 = t % outTasks * kOutTile;
            const int64_t r1 = std::min<int64_t>(rows, r0 + kRowTile);
            const int o1 = static_cast<int>(std::min<int64_t>(out, o0 + kOutTile));
            for (int64_t r = r0; r < r1; r += 4) {
                const int nr = static_cast<int>(std::min<int64_t>(4, r1 - r));
                const float* xs[4];
                for (int i = 0; i < 4; ++i) xs[i] = x + (r + std::min(i, nr - 1)) * ldx;  // padded rows repeat the last
                int o = static_cast<int>(o0);
                for (; o + 2 <= o1; o += 2) {
                    const float* ws[2] = {W + static_cast<int64_t>(o) * in, W + static_cast<int64_t>(o + 1) * in};
                    float d[4][2];
                    block<4, 2>(xs, ws, in, d);
                    for (int i = 0; i < nr; ++i) {
                        float* yr = y + (r + i) * ldy;
                        yr[o] += d[i][0];
                        yr[o + 1] += d[i][1];
                    }
                }
                if (o < o1) {
                    const float* ws[1] = {W + static_cast<int64_t>(o) * in};
                    float d[4][1];
                    block<4, 1>(xs, ws, in, d);
                    for (int i = 0; i < nr; ++i) y[(r + i) * ldy + o] += d[i][0];
                }
            }
        }
    });
}

}  // namespace mamba::cpu
