// The one dispatch point of every matrix product on CUDA (ops/gemm.h): CudaBackend::gemm picks the
// kernel from the product's kind, its row count, the weight's storage type and the mode.
//
// Forward, y = beta·y + x·Wᵀ (+ bias), W [out, in] read ONLY in the storage it is given (w.lowp for
// BF16/F16, w.f32 for F32/TF32; the other pointer may be null):
//
// | storage    | rows ≤ fastGemvMaxRows (8; 4 for 16-bit)   | more rows                                    |
// |------------|-------------------------------------------|----------------------------------------------|
// | F32        | our gemv (gemv.cu), exact f32             | cublasSgemm, default math (no TF32)          |
// | TF32       | our gemv, exact f32 (bandwidth-bound)     | cublasSgemm, TF32 tensor-op math             |
// | BF16 / F16 | our gemv on the 2-byte values, f32 accum. | activations packed to bf16/f16, cublasGemmEx |
//
// GemmMode::Deterministic (GEMM_DETERMINISTIC) has two tiers, chosen from the WEIGHT alone (never from M), so a
// weight's products run in one tier for every row count and a row's bits never depend on the batch:
//  - the tensor-core tier (gemm_tc.cu) for BF16/F16 weights with whole 16-byte rows: x rounded to W's type, one
//    chain of mma instructions per output in ascending k — batch-invariant for every tile shape, fast for every M;
//  - the scalar tier for F32/TF32 (and odd-width 16-bit) weights: the gemv for every row count, 8 rows at a time
//    (its reduction order is a function of the weight's shape alone) — exact f32, and slow for long prefills (the
//    weights are read once per 8 rows).
// GemmMode::Pedantic runs cuBLAS with pedantic math (no TF32 or other reduced-precision shortcuts, even for TF32
// storage).
//
// GemmMode::Reproducible takes the same kernels as Fast: the gemv reduces in a fixed order chosen from the shape
// alone, and cuBLAS is run to run deterministic for a fixed handle, stream, workspace and shape (one
// handle per context, no atomics mode), so a product depends only on its operands.
//
// BackwardData, dx = beta·dx + dy·W, and WeightGrad, dw += dyᵀ·x, dbias += Σ_r dy[r], run on cuBLAS in the
// weight's storage type (ops/gemm.h), mode Reproducible or Pedantic:
//  - BF16/F16: dy (and x) packed to the 2-byte type in the workspace, chunks of rows in a fixed order, W's 2-byte
//    copy, cublasGemmEx with f32 accumulation into the f32 gradient (the chunks of a weight gradient add up in
//    chunk order through beta = 1; the chunk size depends on the shape alone);
//  - F32: true f32 (cublasSgemm, default math) on W's f32 values; TF32: TF32 tensor-op math unless Pedantic.
// The bias gradient is a fixed-order f32 column sum of the unrounded dy.
// linearBackward (the named fusion of a weight's two backward products) packs dy once for both, x beside it, in
// chunks of as many rows as 256 MiB hold (a function of the shape alone): the weight gradient is then usually one
// product over all rows instead of a chain of beta = 1 products over 32 MiB chunks, each re-reading dW (the 130m LM
// head's gradient ran at ≈ 110 TFLOP/s that way on the H200).
//
// cuBLAS is column-major. A row-major matrix M[rows, cols] with row stride ld is the column-major
// cols×rows matrix with leading dimension ld, so with W [out, in] (ld in), x [rows, in] (ld ldx),
// y [rows, out] (ld ldy), dy [rows, out] (ld lddy), dx [rows, in] (ld lddx):
//  - forward   yᶜ(out×rows)  = (Wᶜ)ᵀ · xᶜ:        transa = T, transb = N, m = out, n = rows, k = in;
//  - data grad dxᶜ(in×rows)  = Wᶜ(in×out) · dyᶜ:   transa = N, transb = N, m = in,  n = rows, k = out;
//  - weight    dwᶜ(in×out)  += xᶜ · (dyᶜ)ᵀ:        transa = N, transb = T, m = in,  n = out,  k = rows.
#include "../cuda_backend.h"
#include "gemm_tc.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace mamba::cuda {
namespace {

const char* kindName(GemmKind k) {
    switch (k) {
        case GemmKind::Forward: return "gemm (Forward)";
        case GemmKind::BackwardData: return "gemm (BackwardData)";
        default: return "gemm (WeightGrad)";
    }
}

int toInt(int64_t v, const char* op, const char* what) {
    if (v > std::numeric_limits<int>::max())
        throw std::invalid_argument(std::string(op) + ": " + what + " = " + std::to_string(v) +
                                    " exceeds the 32-bit range of cuBLAS");
    return static_cast<int>(v);
}

bool isLowp(int dtype) { return dtype == DTYPE_BF16 || dtype == DTYPE_F16; }

[[noreturn]] void badLd(const char* op, const char* name, int64_t ld, int64_t cols) {
    fail(std::string(op) + ": " + name + " = " + std::to_string(ld) + " < " + std::to_string(cols) + " columns");
}

/** Host checks of a product's arguments (messages are built only on failure: this runs on every call). */
void validate(const Gemm& g) {
    const char* op = kindName(g.kind);
    if (g.rows < 0) fail(std::string(op) + ": rows = " + std::to_string(g.rows) + " is negative");
    if (g.w.out < 0 || g.w.in < 0)
        fail(std::string(op) + ": weight shape [" + std::to_string(g.w.out) + ", " + std::to_string(g.w.in) +
             "] is negative");
    if (g.a16 || g.b16) fail(std::string(op) + ": rounded operands (a16, b16) are taken by linearBackward only");
    if (g.keep16 && (g.kind != GemmKind::Forward || !isLowp(g.w.dtype)))
        fail(std::string(op) + ": keep16 is for forward products of BF16/F16 weights");
    if (g.rows == 0) return;
    if (!g.a || !g.c) fail(std::string(op) + ": null operand");
    if (g.keep16) {
        const float* keep = static_cast<const float*>(g.keep16);
        const int64_t keep_n = (g.rows * g.w.in + 1) / 2;
        if (!disjoint(keep, keep_n, g.a, span(g.rows, g.lda, g.w.in)) ||
            !disjoint(keep, keep_n, g.c, span(g.rows, g.ldc, g.w.out)))
            fail(std::string(op) + ": keep16 overlaps x or y");
    }
    const bool fwd = g.kind == GemmKind::Forward;
    const int64_t a_cols = fwd ? g.w.in : g.w.out, c_cols = fwd ? g.w.out : g.w.in;
    if (g.rows > 1 && g.lda < a_cols) badLd(op, "lda", g.lda, a_cols);
    if (g.kind == GemmKind::WeightGrad) {
        if (!g.b) fail(std::string(op) + ": null x");
        if (g.rows > 1 && g.ldb < g.w.in) badLd(op, "ldb", g.ldb, g.w.in);
    } else if (g.rows > 1 && g.ldc < c_cols) {
        badLd(op, "ldc", g.ldc, c_cols);
    }
}

/** The cuBLAS math mode of a backward product in f32 storage (F32 or TF32). */
int backwardMath(const Gemm& g) {
    return g.w.dtype == DTYPE_TF32 && g.mode != GemmMode::Pedantic ? kCublasTf32TensorOpMath : kCublasDefaultMath;
}
cudaDataType lowpType(int dtype) { return dtype == DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F; }

}  // namespace

const void* forwardStorage(const Matrix& w, const char* op) {
    const bool lowp = isLowp(w.dtype);
    if (!lowp && w.dtype != DTYPE_F32 && w.dtype != DTYPE_TF32)
        fail(std::string(op) + ": unknown storage dtype code " + std::to_string(w.dtype));
    const void* p = lowp ? w.lowp : static_cast<const void*>(w.f32);
    if (!p)
        fail(std::string(op) + ": a " + (w.dtype == DTYPE_BF16 ? "BF16" : w.dtype == DTYPE_F16 ? "F16" : "F32/TF32") +
             " matrix [" + std::to_string(w.out) + ", " + std::to_string(w.in) + "] without its " +
             (lowp ? "2-byte" : "f32") + " values");
    return p;
}

void CudaBackend::gemm(const Gemm& g) {
    Lock lock(mu_);
    enter();
    runGemm(g);
}

void CudaBackend::runGemm(const Gemm& g) {
    // a forward product given its x already rounded (Gemm::a16) has its own path; every caller comes through here
    if (g.a16 && g.kind == GemmKind::Forward) {
        gemmForwardRounded(nextExec(), g);
        return;
    }
    validate(g);
    if (g.rows == 0) return;
    switch (g.kind) {
        case GemmKind::Forward: gemmForward(nextExec(), g); break;
        case GemmKind::BackwardData: gemmBackwardData(nextExec(), g); break;
        case GemmKind::WeightGrad: gemmWeightGrad(nextExec(), g); break;
    }
}

void CudaBackend::gemmForward(const Exec& e, const Gemm& g) {
    const Matrix& w = g.w;
    const void* wp = forwardStorage(w, "gemm (Forward)");
    if (w.out == 0) return;
    if (g.mode == GemmMode::Deterministic && tensorTierTakes(wp, w.dtype, w.in)) {
        // Every tile but the one-row decode tile rounds x into the workspace; the tier picks the tile, so it
        // always gets the workspace (allocated once per context, before any capture).
        void* workspace = lowpWorkspace();
        gemmTensorTier(e, g.a, g.lda, g.rows, wp, w.dtype, w.out, w.in, g.bias, g.c, g.ldc, g.beta, workspace,
                       lowp_ws_bytes_);
        if (g.keep16) rowsToLowp(e, g.a, g.lda, g.rows, w.in, g.keep16, w.dtype);
        return;
    }
    if (g.rows <= fastGemvMaxRows(w.dtype) || g.mode == GemmMode::Deterministic) {
        // Decode: HBM-bound matrix-vector products; f32 storage (F32 and TF32) runs in exact f32 here.
        for (int64_t r0 = 0; r0 < g.rows; r0 += kGemvMaxRows) {
            const int n = static_cast<int>(std::min<int64_t>(kGemvMaxRows, g.rows - r0));
            gemv(e, g.a + r0 * g.lda, g.lda, n, wp, w.dtype, w.out, w.in, g.bias, g.c + r0 * g.ldc, g.ldc, g.beta);
        }
        if (g.keep16) rowsToLowp(e, g.a, g.lda, g.rows, w.in, g.keep16, w.dtype);
        return;
    }
    const char* op = "gemm (Forward)";
    const int n_rows = toInt(g.rows, op, "rows");
    const int ldx = toInt(g.lda, op, "lda"), ldy = toInt(g.ldc, op, "ldc");
    const bool lowp = isLowp(w.dtype);
    // Everything that may fail for want of cuBLAS or memory comes before the first launch touches y.
    const cublasHandle h = blas();
    void* packed = lowp ? lowpWorkspace() : nullptr;
    float beta = g.beta;
    if (g.bias) {
        biasInit(e, g.c, g.ldc, g.rows, w.out, g.bias, beta);
        beta = 1.f;
    }
    const CublasApi& api = cublas();
    const float one = 1.f;
    const int m = w.out, k = w.in;
    if (!lowp) {
        setMath(g.mode == GemmMode::Pedantic  ? kCublasPedanticMath
                : w.dtype == DTYPE_TF32       ? kCublasTf32TensorOpMath
                                              : kCublasDefaultMath);
        checkCublas(api.sgemm(h, kCublasOpT, kCublasOpN, m, n_rows, k, &one, w.f32, k, g.a, ldx, &beta, g.c, ldy),
                    "cublasSgemm_v2");
        return;
    }
    // bf16/f16 weights: cublasGemmEx needs both operands in 16 bits, so the activations are packed to the
    // weight type in the fixed workspace (chunks of rows); products accumulate in f32 into f32 y.
    setMath(g.mode == GemmMode::Pedantic ? kCublasPedanticMath : kCublasDefaultMath);
    packedRowsGemm(e, kCublasOpT, m, k, w.lowp, k, w.dtype, g.a, g.lda, g.rows, beta, g.c, g.ldc, packed, "cublasGemmEx",
                   g.keep16);
}

void CudaBackend::packedRowsGemm(const Exec& e, int opW, int m, int k, const void* w, int ldw, int dtype,
                                 const float* x, int64_t ldx, int64_t rows, float beta, float* y, int64_t ldy,
                                 void* packed, const char* what, void* keep) {
    const CublasApi& api = cublas();
    const cublasHandle h = blas();
    const float one = 1.f;
    const cudaDataType type = lowpType(dtype);
    const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(lowp_ws_bytes_ / 2) / std::max(k, 1));
    // With `keep`, each chunk is packed straight into its place there when that place is 16-byte aligned as the
    // workspace is (cuBLAS picks its kernel by alignment too: the same bits either way), else copied there after.
    const bool into_keep = keep && k % 8 == 0 && reinterpret_cast<uintptr_t>(keep) % 16 == 0;
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        const int64_t n = std::min(chunk, rows - r0);
        void* dst = into_keep ? static_cast<char*>(keep) + r0 * k * 2 : packed;
        rowsToLowp(e, x + r0 * ldx, ldx, n, k, dst, dtype);
        checkCublas(api.gemmEx(h, opW, kCublasOpN, m, static_cast<int>(n), k, &one, w, type, ldw, dst, type, k,
                               &beta, y + r0 * ldy, CUDA_R_32F, static_cast<int>(ldy), kCublasCompute32F,
                               kCublasGemmDefault),
                    what);
        if (keep && !into_keep)
            check(cudaMemcpyAsync(static_cast<char*>(keep) + r0 * k * 2, packed, static_cast<size_t>(n) * k * 2,
                                  cudaMemcpyDeviceToDevice, e.stream),
                  "gemm (Forward): keeping the rounded x");
    }
}

void CudaBackend::gemmBackwardData(const Exec& e, const Gemm& g) {
    const Matrix& w = g.w;
    const bool lowp = isLowp(w.dtype);
    if (lowp ? !w.lowp : !w.f32)
        fail("gemm (BackwardData): the weight [" + std::to_string(w.out) + ", " + std::to_string(w.in) +
             "] has no " + (lowp ? "2-byte" : "f32") + " values (the backward reads W in its storage type)");
    if (w.in == 0) return;  // (out == 0: cuBLAS scales dx by beta, like an empty sum)
    const char* op = "gemm (BackwardData)";
    const int n_rows = toInt(g.rows, op, "rows");
    const int lddy = toInt(g.lda, op, "lda"), lddx = toInt(g.ldc, op, "ldc");
    const cublasHandle h = blas();
    const CublasApi& api = cublas();
    const float one = 1.f;
    const float beta = g.beta;
    if (!lowp) {
        setMath(backwardMath(g));
        checkCublas(api.sgemm(h, kCublasOpN, kCublasOpN, w.in, n_rows, w.out, &one, w.f32, w.in, g.a, lddy, &beta,
                              g.c, lddx),
                    "cublasSgemm_v2 (input gradient)");
        return;
    }
    // dxᶜ(in×n) = Wᶜ(in×out, 2-byte) · dyᶜ(out×n, packed): a chunk of rows at a time.
    void* packed = lowpWorkspace();
    setMath(g.mode == GemmMode::Pedantic ? kCublasPedanticMath : kCublasDefaultMath);
    packedRowsGemm(e, kCublasOpN, w.in, w.out, w.lowp, w.in, w.dtype, g.a, g.lda, g.rows, beta, g.c, g.ldc, packed,
                   "cublasGemmEx (input gradient)");
}

namespace {
/**
 * cuBLAS picks its kernel by the operands' alignment too: an operand handed over rounded is read in place only where
 * its rows are 16-byte aligned as the packed layout's are (and its width packs to such rows), else it is copied to the
 * packed layout first — either way the same product, bit for bit, as the f32 operand it stands for.
 */
bool readsInPlace(const void* p, int64_t ld, int width) {
    return width % 8 == 0 && ld % 8 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0;
}
/** A rounded operand's floats, for the overlap tests (2-byte values span half as many). */
int64_t span16(int64_t rows, int64_t ld, int64_t cols) { return (span(rows, ld, cols) + 1) / 2; }
}  // namespace

void CudaBackend::gemmForwardRounded(const Exec& e, const Gemm& g) {
    checkRoundedInput(g);
    Gemm stand_in = g;  // validate() sees the rounded rows where x would be (never read as f32)
    stand_in.a = static_cast<const float*>(g.a16);
    stand_in.lda = g.lda16;
    stand_in.a16 = nullptr;
    validate(stand_in);
    const Matrix& w = g.w;
    const void* wp = forwardStorage(w, "gemm (Forward)");
    if (g.rows == 0 || w.out == 0) return;
    const int in = w.in;
    if (g.mode == GemmMode::Deterministic || g.rows <= fastGemvMaxRows(w.dtype)) {
        // The paths that read x in f32 (gemv, the tensor-core tier): the rounded rows widened into the pack workspace,
        // a chunk of rows at a time (each row's result depends on its own row alone on these paths).
        const int64_t room = static_cast<int64_t>(kPackWorkspaceMaxBytes / sizeof(float));
        const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(g.rows, (room - in) / std::max<int64_t>(g.lda16, 1) + 1));
        for (int64_t r0 = 0; r0 < g.rows; r0 += chunk) {
            const int64_t n = std::min(chunk, g.rows - r0), floats = (n - 1) * g.lda16 + in;
            float* x = static_cast<float*>(packWorkspace(static_cast<size_t>(floats) * sizeof(float)));
            fromLowp(e, static_cast<const char*>(g.a16) + r0 * g.lda16 * 2, w.dtype, x, floats);
            Gemm part = g;
            part.a16 = nullptr;
            part.a = x;
            part.lda = g.lda16;
            part.rows = n;
            part.c = g.c + r0 * g.ldc;
            gemmForward(e, part);
        }
        return;
    }
    // cuBLAS: the rounded rows read in place where they are laid out as packed rows are, else copied there; the chunks
    // of rows are packedRowsGemm's, so the product is the one of the f32 rows they stand for, bit for bit
    const cublasHandle h = blas();
    void* packed = lowpWorkspace();
    float beta = g.beta;
    if (g.bias) {
        biasInit(e, g.c, g.ldc, g.rows, w.out, g.bias, beta);
        beta = 1.f;
    }
    setMath(g.mode == GemmMode::Pedantic ? kCublasPedanticMath : kCublasDefaultMath);
    const LowpOperand x{nullptr, g.lda16, g.a16, readsInPlace(g.a16, g.lda16, in) ? nullptr : packed};
    const cudaDataType type = lowpType(w.dtype);
    const float one = 1.f;
    const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(lowp_ws_bytes_ / 2) / std::max(in, 1));
    for (int64_t r0 = 0; r0 < g.rows; r0 += chunk) {
        const int64_t n = std::min(chunk, g.rows - r0);
        int ldx = 0;
        const void* xc = x.chunk(e, r0, n, in, w.dtype, &ldx);
        checkCublas(cublas().gemmEx(h, kCublasOpT, kCublasOpN, w.out, static_cast<int>(n), in, &one, wp, type, in, xc,
                                    type, ldx, &beta, g.c + r0 * g.ldc, CUDA_R_32F, toInt(g.ldc, "gemm (Forward)", "ldc"),
                                    kCublasCompute32F, kCublasGemmDefault),
                    "cublasGemmEx");
    }
}

const void* CudaBackend::LowpOperand::chunk(const Exec& e, int64_t r0, int64_t n, int width, int dtype,
                                            int* ld_out) const {
    *ld_out = width;
    if (f32) {
        rowsToLowp(e, f32 + r0 * ld, ld, n, width, pack, dtype);
        return pack;
    }
    const char* at = static_cast<const char*>(rounded) + r0 * ld * 2;
    if (!pack) {
        *ld_out = static_cast<int>(ld);
        return at;
    }
    check(cudaMemcpy2DAsync(pack, static_cast<size_t>(width) * 2, at, static_cast<size_t>(ld) * 2,
                            static_cast<size_t>(width) * 2, static_cast<size_t>(n), cudaMemcpyDeviceToDevice, e.stream),
          "linearBackward (copy of a rounded operand)");
    return pack;
}

void CudaBackend::linearBackward(const Gemm& data0, const Gemm& weight0) {
    Lock lock(mu_);
    enter();
    checkRoundedOperands(data0, weight0);
    const bool dy16 = weight0.a16 != nullptr, x16 = weight0.b16 != nullptr;
    // validate() sees stand-in f32 pointers where operands come rounded (never read as f32)
    Gemm data = data0, weight = weight0;
    if (dy16)
        for (Gemm* g : {&data, &weight}) {
            g->a = static_cast<const float*>(g->a16);
            g->lda = g->lda16;
            g->a16 = nullptr;
        }
    if (x16) {
        weight.b = static_cast<const float*>(weight.b16);
        weight.ldb = weight.ldb16;
        weight.b16 = nullptr;
    }
    validate(data);
    validate(weight);
    if (data.kind != GemmKind::BackwardData || weight.kind != GemmKind::WeightGrad || data.rows != weight.rows ||
        data.a != weight.a || data.lda != weight.lda || data.w.out != weight.w.out || data.w.in != weight.w.in ||
        data.w.dtype != weight.w.dtype || data.mode != weight.mode)
        fail("linearBackward: the two products must share rows, dy, the weight's shape, storage type and mode");
    const int out = weight.w.out, in = weight.w.in;
    if (!isLowp(weight.w.dtype) || data.rows == 0 || out == 0 || in == 0) {
        if ((dy16 || x16) && data.rows > 0) fail("linearBackward: rounded operands need a non-empty BF16/F16 weight");
        runGemm(weight);
        runGemm(data);
        return;
    }
    if (!data.w.lowp)
        fail("linearBackward: the weight [" + std::to_string(out) + ", " + std::to_string(in) + "] has no 2-byte values");
    const int64_t rows = data.rows;
    const int64_t dx_n = span(rows, data.ldc, in);
    const int64_t dy_n = dy16 ? span16(rows, data.lda, out) : span(rows, data.lda, out);
    const int64_t x_n = x16 ? span16(rows, weight.ldb, in) : span(rows, weight.ldb, in);
    if (!disjoint(data.c, dx_n, data.a, dy_n) || !disjoint(data.c, dx_n, weight.b, x_n))
        fail("linearBackward: the input gradient overlaps dy or x");
    toInt(rows, "linearBackward", "rows");
    toInt(data.ldc, "linearBackward", "ldc");
    const Exec e = nextExec();
    // The chunk is a function of the shape alone (as many rows as kPackWorkspaceMaxBytes holds), so the weight
    // gradient's sum order never depends on what the context ran before; usually it is one product over every row.
    // Rounded operands keep the same chunk, so that the sums run in the order of the f32 operands they stand for.
    const size_t row_bytes = 2 * (static_cast<size_t>(in) + out);
    const int64_t chunk = std::max<int64_t>(
        1, std::min<int64_t>(rows, static_cast<int64_t>((kPackWorkspaceMaxBytes - 256) / row_bytes)));
    const bool x_in_place = x16 && readsInPlace(weight.b, weight.ldb, in);
    const bool dy_in_place = dy16 && readsInPlace(weight.a, weight.lda, out);
    const size_t x_bytes = x_in_place ? 0 : (static_cast<size_t>(chunk) * in * 2 + 255) / 256 * 256;
    const size_t dy_bytes = dy_in_place ? 0 : static_cast<size_t>(chunk) * out * 2;
    char* ws = static_cast<char*>(packWorkspace(std::max<size_t>(x_bytes + dy_bytes, 256)));
    const LowpOperand x{x16 ? nullptr : weight.b, weight.ldb, x16 ? weight.b : nullptr, x_in_place ? nullptr : ws};
    const LowpOperand dy{dy16 ? nullptr : weight.a, weight.lda, dy16 ? weight.a : nullptr,
                         dy_in_place ? nullptr : ws + x_bytes};
    packedBackward(e, weight, &data, x, dy, chunk);
    if (weight.dbias)
        train::columnSums(e, weight.a, weight.lda, nullptr, 0, nullptr, rows, out, weight.dbias, trainScratch());
}

void CudaBackend::packedBackward(const Exec& e, const Gemm& weight, const Gemm* data, const LowpOperand& x,
                                 const LowpOperand& dy, int64_t chunk) {
    const int out = weight.w.out, in = weight.w.in;
    const cublasHandle h = blas();
    const CublasApi& api = cublas();
    setMath(weight.mode == GemmMode::Pedantic ? kCublasPedanticMath : kCublasDefaultMath);
    const cudaDataType type = lowpType(weight.w.dtype);
    const float one = 1.f;
    for (int64_t r0 = 0; r0 < weight.rows; r0 += chunk) {
        const int64_t n = std::min(chunk, weight.rows - r0);
        int ldx = 0, lddy = 0;
        const void* xc = x.chunk(e, r0, n, in, weight.w.dtype, &ldx);
        const void* dyc = dy.chunk(e, r0, n, out, weight.w.dtype, &lddy);
        if (data)
            checkCublas(api.gemmEx(h, kCublasOpN, kCublasOpN, in, static_cast<int>(n), out, &one, data->w.lowp, type, in,
                                   dyc, type, lddy, &data->beta, data->c + r0 * data->ldc, CUDA_R_32F,
                                   static_cast<int>(data->ldc), kCublasCompute32F, kCublasGemmDefault),
                        "cublasGemmEx (input gradient)");
        checkCublas(api.gemmEx(h, kCublasOpN, kCublasOpT, in, out, static_cast<int>(n), &one, xc, type, ldx, dyc, type,
                               lddy, &one, weight.c, CUDA_R_32F, in, kCublasCompute32F, kCublasGemmDefault),
                    "cublasGemmEx (weight gradient)");
    }
}

void CudaBackend::gemmWeightGrad(const Exec& e, const Gemm& g) {
    const int out = g.w.out, in = g.w.in;
    if (out == 0) return;
    if (in > 0) {
        const char* op = "gemm (WeightGrad)";
        const int n_rows = toInt(g.rows, op, "rows");
        const int lddy = toInt(g.lda, op, "lda"), ldx = toInt(g.ldb, op, "ldb");
        if (!isLowp(g.w.dtype)) {
            const float one = 1.f;
            setMath(backwardMath(g));
            checkCublas(cublas().sgemm(blas(), kCublasOpN, kCublasOpT, in, out, n_rows, &one, g.b, ldx, g.a, lddy, &one,
                                       g.c, in),
                        "cublasSgemm_v2 (weight gradient)");
        } else {
            // x and dy packed side by side in the fixed workspace, chunk by chunk
            char* ws = static_cast<char*>(lowpWorkspace());
            const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(lowp_ws_bytes_ / 2) / (int64_t{in} + out));
            packedBackward(e, g, nullptr, LowpOperand{g.b, g.ldb, nullptr, ws},
                           LowpOperand{g.a, g.lda, nullptr, ws + chunk * in * 2}, chunk);
        }
    }
    if (g.dbias) train::columnSums(e, g.a, g.lda, nullptr, 0, nullptr, g.rows, out, g.dbias, trainScratch());
}

}  // namespace mamba::cuda
