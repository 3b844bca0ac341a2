// The CPU's one GEMM dispatch point: every product of every architecture arrives here as a Gemm.
//
// Forward, y = beta·y + x·Wᵀ (+ bias), by storage type and mode:
//
// | storage   | mode                     | kernel                                                                 |
// |-----------|--------------------------|------------------------------------------------------------------------|
// | F32, TF32 | Fast, one row            | OpenBLAS sgemv; single-threaded below kSingleThreadMacs multiply-adds  |
// |           |                          | (waking its threads costs more than the product), threaded above       |
// |           | more rows; Reproducible, | fixed tiles of C, each one single-threaded sgemm, spread over our pool:|
// |           | Pedantic                 | results depend on the operands only, never on thread counts            |
// | BF16, F16 | ≤ kWidenedTileRows rows  | the fixed-order kernel reading the 2-byte weights (decode is bound by  |
// |           | (every mode)             | the weight reads: half of f32's bytes)                                 |
// |           | more rows                | the fixed tiles above, each widening its weight rows to f32 in a       |
// |           |                          | per-thread buffer, then one single-threaded sgemm                      |
//
// Why Fast runs products of several rows on our pool's fixed tiles and not on OpenBLAS's threads (2026-12-02, the
// 130m shape, F32 prefill, 2 vCPUs): idle, 54 vs 58 ms at 8 tokens, 159 vs 157 ms at 64, 1048 vs 876 ms at 512
// (OpenBLAS threads vs tiles); with two other busy processes 345 vs 157, 1056 vs 462 and 2701 vs 2107 ms — OpenBLAS's
// spinning threads collapse when the cores are shared. BF16 prefill, idle: 211 vs 185 ms at 64 tokens, 1244 vs
// 1022 ms at 512 (the weights widened in blocks for threaded sgemm vs per tile).
// | any       | Deterministic            | our fixed-order dot products (cpu_gemm_deterministic.cpp) for every    |
// |           |                          | row count: batch-invariant too                                         |
//
// TF32 storage holds f32 values and the CPU has no TF32 arithmetic: its products are exact f32 (TF32 only
// *allows* a backend to round the operands). 16-bit weights are widened exactly; products always accumulate
// in f32 on f32 activations (CUDA rounds the activations to bf16/f16 for its batched tensor-core products).
//
//   BackwardData            dx = beta·dx + dy·W with W's f32 values (a 16-bit model's trainer passes its f32
//                           masters), tiled as above (always reproducible).
//   WeightGrad              dw += dyᵀ·x over all rows in one product per tile; dbias += column sums of dy,
//                           rows in order (always reproducible).
//
// Every OpenBLAS call of the backend is in this file, under the locks described in blas_threads.h.
#include "cpu_backend.h"

#include "blas_threads.h"
#include "core/errors.h"
#include "cpu_gemm_deterministic.h"
#include "lowp.h"
#include "thread_pool.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <string>

namespace mamba::cpu {
namespace {

constexpr int64_t kSingleThreadMacs = int64_t{1} << 20;

// 16-bit weights: up to this many rows the fixed-order kernel (memory-bound, reads each weight once per 16
// rows); above, widened tiles + sgemm (compute-bound). Measured with op_test --time (docs/benchmarks.md).
constexpr int64_t kWidenedTileRows = 16;

bool isLowp(int dtype) { return dtype == DTYPE_BF16 || dtype == DTYPE_F16; }

// Tiles of C for the reproducible products: about 8 row tiles of 32..256 rows (a multiple of 16) by
// 256-column tiles. A function of the shape only, never of the thread count.
constexpr int64_t kTileN = 256;
inline int64_t tileRows(int64_t M) { return std::min<int64_t>(256, std::max<int64_t>(32, (M / 8 + 15) / 16 * 16)); }

/**
 * C[M, N] = beta·C + op(A)·op(B) (row-major; op(A) is [M, K], op(B) is [K, N]) as independent tiles of C,
 * each with the whole K range in one single-threaded sgemm. The caller holds BlasRead (the tiles run on
 * pool workers, which it covers).
 */
void gemmTiled(bool transA, bool transB, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
               int64_t ldb, float beta, float* C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    const int64_t TM = tileRows(M);
    const int64_t tm = (M + TM - 1) / TM, tn = (N + kTileN - 1) / kTileN;
    const int64_t perTile = std::min(M, TM) * std::min(N, kTileN) * std::max<int64_t>(K, 1);
    parallelFor(tm * tn, perTile >= (1 << 16) ? 1 : std::max<int64_t>(1, (1 << 16) / perTile),
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

/**
 * y[M, N] = beta·y + x[M, K]·Wᵀ with W [N, K] in 16 bits, as the fixed tiles of gemmTiled (a function of the shape
 * only): each tile widens its kTileN weight rows to f32 in the running thread's buffer, then runs one
 * single-threaded sgemm. The caller holds BlasRead.
 */
void gemmTiledWidened(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* W, bool f16,
                      float beta, float* y, int64_t ldy) {
    if (M <= 0 || N <= 0 || K <= 0) return;
    const int64_t TM = tileRows(M);
    const int64_t tm = (M + TM - 1) / TM, tn = (N + kTileN - 1) / kTileN;
    const int64_t perTile = std::min(M, TM) * std::min(N, kTileN) * K;
    parallelFor(tm * tn, perTile >= (1 << 16) ? 1 : std::max<int64_t>(1, (1 << 16) / perTile), [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const int64_t i0 = t / tn * TM, j0 = t % tn * kTileN;
            const int64_t m = std::min(TM, M - i0), n = std::min(kTileN, N - j0);
            float* w = workerScratch(7, n * K);
            widenToF32(W + j0 * K, f16, w, n * K);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                        static_cast<int>(K), 1.f, x + i0 * ldx, static_cast<int>(ldx), w, static_cast<int>(K), beta,
                        y + i0 * ldy + j0, static_cast<int>(ldy));
        }
    });
}

/** acc[j] += Σ_r x[r, j] for j < cols, rows in order; parallel over column blocks. */
void columnSums(const float* x, int64_t ldx, int64_t rows, int cols, float* acc) {
    const int blocks = (cols + kChannelBlock - 1) / kChannelBlock;
    parallelFor(blocks, rows * cols > kMinParallelWork ? 1 : 1 << 30, [&](int64_t b0, int64_t b1) {
        for (int64_t blk = b0; blk < b1; ++blk) {
            const int j0 = static_cast<int>(blk) * kChannelBlock, nj = std::min(kChannelBlock, cols - j0);
            float s[kChannelBlock] = {};
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
 * y[r] = beta·y[r] + bias for r < rows, before a product accumulates into y (y is not read when beta == 0;
 * a null bias adds nothing). The one place a bias is applied.
 */
void applyBias(float* y, int64_t ldy, int64_t rows, int out, const float* bias, float beta) {
    parallelFor(rows, kMinParallelWork / std::max(1, out), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            float* yr = y + r * ldy;
            if (bias == nullptr) {
                for (int o = 0; o < out; ++o) yr[o] = beta == 0.f ? 0.f : beta * yr[o];
            } else if (beta == 0.f) {
                std::copy(bias, bias + out, yr);
            } else {
                for (int o = 0; o < out; ++o) yr[o] = beta * yr[o] + bias[o];
            }
        }
    });
}

[[noreturn]] void bad(const Gemm& g, const std::string& what) {
    static const char* kinds[] = {"Forward", "BackwardData", "WeightGrad", "?"};
    const unsigned kind = std::min(3u, static_cast<unsigned>(g.kind));
    fail(std::string("gemm (") + kinds[kind] + ", " + std::to_string(g.w.out) + "x" + std::to_string(g.w.in) +
         ", rows " + std::to_string(g.rows) + "): " + what);
}

std::string ldMessage(const char* name, int64_t ld, int64_t width) {
    return std::string(name) + " = " + std::to_string(ld) + " must be in [" + std::to_string(width) + ", 2^31)";
}

// A leading dimension covers its row width (anything goes for empty rows: nothing is read or written, and
// no BLAS call is made for an empty dimension, so Gemm::weightGrad's ldc = in = 0 is fine).
bool ldOk(int64_t ld, int64_t width) { return ld >= width && ld <= INT_MAX; }

/** Shapes and strides (OpenBLAS takes int). Messages are built only on failure: this runs on every product. */
void validate(const Gemm& g) {
    const unsigned kind = static_cast<unsigned>(g.kind);
    if (kind > 2) bad(g, "unknown GemmKind " + std::to_string(kind));
    if (g.rows < 0 || g.rows > INT_MAX) bad(g, "rows must be in [0, 2^31)");
    if (g.a16 || g.b16) bad(g, "rounded operands (a16, b16) are taken by linearBackward only");
    if (g.keep16) bad(g, "keep16 needs a backend that rounds its operands (Capabilities::rounds_backward_operands)");
    if (g.w.out < 0 || g.w.in < 0) bad(g, "negative weight shape");
    const bool emptyW = static_cast<int64_t>(g.w.out) * g.w.in == 0;
    if (g.kind == GemmKind::Forward) {  // W is read in its storage type
        const int dt = g.w.dtype;
        if (dt != DTYPE_F32 && dt != DTYPE_TF32 && !isLowp(dt)) bad(g, "unknown storage dtype code " + std::to_string(dt));
        if (isLowp(dt) && g.w.lowp == nullptr && !emptyW) bad(g, "the 16-bit weight has no 2-byte values");
        if (!isLowp(dt) && g.w.f32 == nullptr && !emptyW) bad(g, "the weight has no f32 values");
    } else if (g.kind == GemmKind::BackwardData) {
        if (g.w.f32 == nullptr && !emptyW) bad(g, "the weight has no f32 values (the backward reads W as f32)");
    }
    const int64_t aw = g.kind == GemmKind::Forward ? g.w.in : g.w.out;       // width of a's rows
    const int64_t cw = g.kind == GemmKind::BackwardData ? g.w.in : g.w.out;  // width of c's rows (not WeightGrad)
    if (g.rows > 0 && g.a == nullptr) bad(g, "a is null");
    if (!ldOk(g.lda, aw)) bad(g, ldMessage("lda", g.lda, aw));
    if (g.kind == GemmKind::WeightGrad) {
        if (g.rows > 0 && g.b == nullptr) bad(g, "b (x) is null");
        if (!ldOk(g.ldb, g.w.in)) bad(g, ldMessage("ldb", g.ldb, g.w.in));
        if (g.c == nullptr && !emptyW) bad(g, "dw is null");
        if (!ldOk(g.ldc, g.w.in)) bad(g, ldMessage("ldc", g.ldc, g.w.in));
    } else {
        if (g.rows > 0 && g.c == nullptr) bad(g, "c is null");
        if (!ldOk(g.ldc, cw)) bad(g, ldMessage("ldc", g.ldc, cw));
    }
}

/** Fast mode, F32 weights, one row: the decode GEMV. */
void forwardFastRow(const Gemm& g, float beta) {
    const Matrix& w = g.w;
    const auto call = [&] { cblas_sgemv(CblasRowMajor, CblasNoTrans, w.out, w.in, 1.f, w.f32, w.in, g.a, 1, beta, g.c, 1); };
    const int threads = blasThreads();
    if (threads > 1 && g.rows * w.out * static_cast<int64_t>(w.in) >= kSingleThreadMacs && blasThreadedAllowed()) {
        BlasThreaded hold(threads);
        call();
    } else {
        BlasRead hold;
        call();
    }
}

}  // namespace

void CpuBackend::gemm(const Gemm& g) {
    if (g.a16 && g.kind == GemmKind::Forward) return gemmWidened(g);
    validate(g);
    const Matrix& w = g.w;
    if (g.rows == 0) return;
    switch (g.kind) {
        case GemmKind::Forward: {
            if (w.out == 0) return;
            float beta = g.beta;
            const bool lowp = isLowp(w.dtype);
            const bool fixedOrder = g.mode == GemmMode::Deterministic || (lowp && g.rows <= kWidenedTileRows);
            if (g.bias || w.in == 0 || (fixedOrder && beta != 1.f)) {  // y = beta·y + bias once; the product adds to it
                applyBias(g.c, g.ldc, g.rows, w.out, g.bias, beta);
                beta = 1.f;
            }
            if (w.in == 0) return;
            const auto* w16 = static_cast<const uint16_t*>(w.lowp);
            if (fixedOrder && lowp) {
                gemmDeterministicAccumulate16(g.a, g.lda, g.rows, w16, w.dtype == DTYPE_F16, w.out, w.in, g.c, g.ldc);
            } else if (fixedOrder) {
                gemmDeterministicAccumulate(g.a, g.lda, g.rows, w.f32, w.out, w.in, g.c, g.ldc);
            } else if (lowp) {
                BlasRead hold;
                gemmTiledWidened(g.rows, w.out, w.in, g.a, g.lda, w16, w.dtype == DTYPE_F16, beta, g.c, g.ldc);
            } else if (g.mode == GemmMode::Fast && g.rows == 1) {
                forwardFastRow(g, beta);
            } else {
                BlasRead hold;
                // y[rows, out] = beta·y + x[rows, in] · W[out, in]ᵀ
                gemmTiled(false, true, g.rows, w.out, w.in, g.a, g.lda, w.f32, w.in, beta, g.c, g.ldc);
            }
            return;
        }
        case GemmKind::BackwardData: {
            BlasRead hold;
            // dx[rows, in] = beta·dx + dy[rows, out] · W[out, in]   (out == 0: dx = beta·dx)
            gemmTiled(false, false, g.rows, w.in, w.out, g.a, g.lda, w.f32, w.in, g.beta, g.c, g.ldc);
            return;
        }
        case GemmKind::WeightGrad: {
            {
                BlasRead hold;
                // dw[out, in] += dy[rows, out]ᵀ · x[rows, in]: every row in one product per tile.
                gemmTiled(true, false, w.out, w.in, g.rows, g.a, g.lda, g.b, g.ldb, 1.f, g.c, g.ldc);
            }
            if (g.dbias) columnSums(g.a, g.lda, g.rows, w.out, g.dbias);
            return;
        }
    }
}

}  // namespace mamba::cpu
