// The CPU's fixed-order product: y[r, o] += dot(x[r, :], W[o, :]) where every dot product is computed by
// the same arithmetic whatever the number of rows, the other rows, the tiling or the thread count — so a
// row's output is bit-identical for any batch (batch-invariant) and any CPU thread count. It is the whole of
// GEMM_DETERMINISTIC on the CPU, and the decode kernel of 16-bit weights in every mode (cpu_gemm.cpp).
//
// The fixed order ("8-lane FMA"): lane j accumulates x[k]·w[k] for k ≡ j (mod 8), k ascending, with one FMA
// each (a partial last block is zero-padded, which adds exact zeros); the lanes are then summed as
// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). dotReference() spells that order out in scalar code; the
// vector kernels reproduce it exactly (tests compare them bit for bit). Each micro-kernel (R rows × C outputs)
// keeps one accumulator per output element, so the choice of micro-kernel changes speed, never bits.
//
// 16-bit weights (BF16/F16 storage) are widened to f32 exactly as they are loaded (bf16: a 16-bit shift;
// f16: F16C's vcvtph2ps), then go through the same FMAs: a 16-bit matrix gives dotReference(x, widen(W[o])),
// f32 compute on 2-byte reads — half the memory traffic of f32 weights, which is what bounds decode.
#include "cpu_gemm_deterministic.h"

#include "thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace mamba::cpu {

namespace {

// ---- weight readers: 8 consecutive values of one row, widened to f32 ----

struct F32Weights {
    using T = float;
    static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
};

struct Bf16Weights {  // bf16 is the top half of an f32: zero-extend to 32 bits, shift into place
    using T = uint16_t;
    static __m256 load(const uint16_t* p) {
        const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
    }
};

struct F16Weights {  // F16C: exact for every half, subnormals included
    using T = uint16_t;
    static __m256 load(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
};

/** The last n < 8 values of a row (weights or activations), zero-padded to a full register. */
template <class Reader>
inline __m256 loadTail(const typename Reader::T* p, int n) {
    alignas(32) typename Reader::T buf[8] = {};
    for (int i = 0; i < n; ++i) buf[i] = p[i];
    return Reader::load(buf);
}

/** The lane tree of the fixed order, on a register of 8 lanes. */
inline float laneSum(__m256 acc) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));  // l_i + l_{i+4}
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));                                     // (0+2), (1+3)
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));                            // (0+2) + (1+3)
}

/**
 * Software prefetch for the single-row (decode) kernel, which is bound by the weight reads: while a block reads
 * its C weight rows, the rows kPrefetchRows further on are fetched into L2, one stretch per k-step, so the whole
 * block ahead arrives in time (the hardware prefetchers alone left bf16 decode at ≈ 70% of f32's bandwidth).
 * `at` walks forward; nothing at or past `end` (the matrix's end) is touched. Prefetches never change results.
 */
struct Prefetch {
    uintptr_t at, end;
    template <int Bytes>
    void advance() {
        for (int b = 0; b < Bytes; b += 64)
            if (at + b < end) _mm_prefetch(reinterpret_cast<const char*>(at + b), _MM_HINT_T1);
        at += Bytes;
    }
};
constexpr int kPrefetchRows = 32;

/**
 * R rows × C outputs of dot products, each element in the fixed order; out[i][j] = dot(x_i, w_j). With a
 * Prefetch, each k-step also prefetches as many bytes as it reads.
 */
template <class W, int R, int C>
inline void block(const float* const* x, const typename W::T* const* w, int K, float (&out)[R][C],
                  Prefetch* pf = nullptr) {
    __m256 acc[R][C];
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) acc[i][j] = _mm256_setzero_ps();
    const int K8 = K / 8 * 8;
    for (int k = 0; k < K8; k += 8) {
        if (pf) pf->advance<C * 8 * static_cast<int>(sizeof(typename W::T))>();
        __m256 wv[C];
        for (int j = 0; j < C; ++j) wv[j] = W::load(w[j] + k);
        for (int i = 0; i < R; ++i) {
            const __m256 xv = _mm256_loadu_ps(x[i] + k);
            for (int j = 0; j < C; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    if (K8 < K) {
        __m256 wv[C];
        for (int j = 0; j < C; ++j) wv[j] = loadTail<W>(w[j] + K8, K - K8);
        for (int i = 0; i < R; ++i) {
            const __m256 xv = loadTail<F32Weights>(x[i] + K8, K - K8);
            for (int j = 0; j < C; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) out[i][j] = laneSum(acc[i][j]);
}

/**
 * y[r, o] += dot for R rows starting at xs (row pointers; rows past nr repeat the last, their results dropped)
 * and outputs [o0, o1), C outputs at a time, then one at a time.
 */
template <class W, int R, int C>
inline void rowsBlock(const float* const* xs, int nr, const typename W::T* Wm, int out, int o0, int o1, int in,
                      float* y, int64_t ldy) {
    // One row: prefetch (see Prefetch). More rows reuse each weight R times and are not bound by its reads.
    constexpr uintptr_t kBytes = sizeof(typename W::T);
    const uintptr_t base = reinterpret_cast<uintptr_t>(Wm);  // addresses as integers: the stream may run past the end
    Prefetch pf{base + (static_cast<uintptr_t>(o0) + kPrefetchRows) * in * kBytes, base + static_cast<uintptr_t>(out) * in * kBytes};
    int o = o0;
    for (; o + C <= o1; o += C) {
        const typename W::T* ws[C];
        for (int j = 0; j < C; ++j) ws[j] = Wm + static_cast<int64_t>(o + j) * in;
        float d[R][C];
        block<W, R, C>(xs, ws, in, d, R == 1 ? &pf : nullptr);
        for (int i = 0; i < nr; ++i)
            for (int j = 0; j < C; ++j) y[i * ldy + o + j] += d[i][j];
    }
    for (; o < o1; ++o) {
        const typename W::T* ws[1] = {Wm + static_cast<int64_t>(o) * in};
        float d[R][1];
        block<W, R, 1>(xs, ws, in, d, R == 1 ? &pf : nullptr);
        for (int i = 0; i < nr; ++i) y[i * ldy + o] += d[i][0];
    }
}

// Work split: tasks of kRowTile rows × kOutTile outputs (shape-only constants; the bits never depend on them).
constexpr int kRowTile = 16;
constexpr int kOutTile = 64;

template <class W>
void accumulate(const float* x, int64_t ldx, int64_t rows, const typename W::T* Wm, int out, int in, float* y,
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
                if (nr == 1) {  // a lone row (decode): 4 weight rows in flight, no padded rows
                    const float* xs[1] = {x + r * ldx};
                    rowsBlock<W, 1, 4>(xs, 1, Wm, out, static_cast<int>(o0), o1, in, y + r * ldy, ldy);
                    continue;
                }
                const float* xs[4];
                for (int i = 0; i < 4; ++i) xs[i] = x + (r + std::min(i, nr - 1)) * ldx;  // padded rows repeat the last
                rowsBlock<W, 4, 2>(xs, nr, Wm, out, static_cast<int>(o0), o1, in, y + r * ldy, ldy);
            }
        }
    });
}

}  // namespace

float dotReference(const float* x, const float* w, int K) {
    float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int k = 0; k < K; ++k) l[k % 8] = std::fma(x[k], w[k], l[k % 8]);
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

void gemmDeterministicAccumulate(const float* x, int64_t ldx, int64_t rows, const float* W, int out, int in, float* y,
                                 int64_t ldy) {
    accumulate<F32Weights>(x, ldx, rows, W, out, in, y, ldy);
}

void gemmDeterministicAccumulate16(const float* x, int64_t ldx, int64_t rows, const uint16_t* W, bool f16, int out,
                                   int in, float* y, int64_t ldy) {
    if (f16)
        accumulate<F16Weights>(x, ldx, rows, W, out, in, y, ldy);
    else
        accumulate<Bf16Weights>(x, ldx, rows, W, out, in, y, ldy);
}

}  // namespace mamba::cpu
