// Ops::linearBackward's default (the CPU's): the two products in sequence. Operands handed over rounded to the
// weight's 2-byte type (Gemm::a16 / b16) are widened to f32 first — the values the products then see are the rounded
// ones, which is what a backend that rounds operands itself (CUDA) multiplies as well. Ops::gemmWidened does the same
// for a Forward product's rounded x.
#include "core/buffer.h"
#include "ops/ops.h"

#include <optional>

namespace mamba {

namespace {
/** A [rows, ld] 2-byte operand widened to f32 (same ld). */
Buffer widened(Ops& ops, const void* v16, int64_t ld, int64_t rows, int width, int dtype) {
    const int64_t n = (rows - 1) * ld + width;
    Buffer out(ops, n);
    ops.fromLowPrecision(v16, dtype, out.data(), n);
    return out;
}
}  // namespace

void Ops::linearBackward(const Gemm& dataGrad, const Gemm& weightGrad) {
    checkRoundedOperands(dataGrad, weightGrad);
    const int64_t rows = weightGrad.rows;
    Gemm data = dataGrad, weight = weightGrad;
    std::optional<Buffer> dy, x;
    if (weightGrad.a16 && rows > 0) {
        dy.emplace(widened(*this, weightGrad.a16, weightGrad.lda16, rows, weightGrad.w.out, weightGrad.w.dtype));
        for (Gemm* g : {&data, &weight}) {
            g->a = dy->data();
            g->lda = weightGrad.lda16;
            g->a16 = nullptr;
        }
    }
    if (weightGrad.b16 && rows > 0) {
        x.emplace(widened(*this, weightGrad.b16, weightGrad.ldb16, rows, weightGrad.w.in, weightGrad.w.dtype));
        weight.b = x->data();
        weight.ldb = weightGrad.ldb16;
        weight.b16 = nullptr;
    }
    data.a16 = weight.a16 = weight.b16 = nullptr;  // (no rows: nothing to widen, nothing read)
    gemm(weight);
    gemm(data);
}

void Ops::gemmWidened(const Gemm& g) {
    checkRoundedInput(g);
    Gemm f = g;
    f.a16 = nullptr;
    std::optional<Buffer> x;
    if (g.rows > 0) {
        x.emplace(widened(*this, g.a16, g.lda16, g.rows, g.w.in, g.w.dtype));
        f.a = x->data();
        f.lda = g.lda16;
    }
    gemm(f);
}

}  // namespace mamba
