// Ops::linearBackward's default (the CPU's): the two products in sequence. A dy handed over rounded to the weight's
// 2-byte type (Gemm::a16) is widened to f32 first — the values the products then see are the rounded ones, which is
// what a backend that rounds dy itself (CUDA) multiplies as well.
#include "core/buffer.h"
#include "ops/ops.h"

namespace mamba {

void Ops::linearBackward(const Gemm& dataGrad, const Gemm& weightGrad) {
    if (!dataGrad.a16 && !weightGrad.a16) {
        gemm(weightGrad);
        gemm(dataGrad);
        return;
    }
    checkRoundedDy(dataGrad, weightGrad);
    const int64_t rows = weightGrad.rows;
    if (rows == 0) return;
    const int64_t n = (rows - 1) * weightGrad.lda16 + weightGrad.w.out;
    Buffer dy(*this, n);
    fromLowPrecision(weightGrad.a16, weightGrad.w.dtype, dy.data(), n);
    Gemm data = dataGrad, weight = weightGrad;
    for (Gemm* g : {&data, &weight}) {
        g->a = dy.data();
        g->lda = weightGrad.lda16;
        g->a16 = nullptr;
    }
    gemm(weight);
    gemm(data);
}

}  // namespace mamba
