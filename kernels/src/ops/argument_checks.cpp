// Checks of op arguments that every backend makes the same way (declared in ops/ops.h).
#include "core/errors.h"
#include "ops/ops.h"

#include <string>

namespace mamba {

void checkRoundedOperands(const Gemm& dataGrad, const Gemm& weightGrad) {
    if (dataGrad.keep16 || weightGrad.keep16) fail("linearBackward: keep16 belongs to forward products");
    if (dataGrad.b16) fail("linearBackward: the input gradient has no x to give rounded (b16)");
    const bool dy16 = dataGrad.a16 || weightGrad.a16;
    if (!dy16 && !weightGrad.b16) return;
    const int dtype = weightGrad.w.dtype;
    if (dtype != DTYPE_BF16 && dtype != DTYPE_F16)
        fail("linearBackward: rounded operands need BF16 or F16 weight storage, not dtype code " + std::to_string(dtype));
    if (dy16) {
        if (dataGrad.a16 != weightGrad.a16 || dataGrad.lda16 != weightGrad.lda16 || dataGrad.a || weightGrad.a)
            fail("linearBackward: a rounded dy (a16) must be the same in both products, with no f32 dy beside it");
        if (weightGrad.dbias) fail("linearBackward: a rounded dy cannot give a bias gradient (it sums the f32 dy)");
        if (weightGrad.rows > 1 && weightGrad.lda16 < weightGrad.w.out)
            fail("linearBackward: lda16 = " + std::to_string(weightGrad.lda16) + " is less than the " +
                 std::to_string(weightGrad.w.out) + " outputs");
    }
    if (weightGrad.b16) {
        if (weightGrad.b) fail("linearBackward: a rounded x (b16) with an f32 x beside it");
        if (weightGrad.rows > 1 && weightGrad.ldb16 < weightGrad.w.in)
            fail("linearBackward: ldb16 = " + std::to_string(weightGrad.ldb16) + " is less than the " +
                 std::to_string(weightGrad.w.in) + " inputs");
    }
}

void checkCrossEntropyGrad(const CrossEntropyArgs& a) {
    if (!a.dlogits16) return;
    if (a.dlogits) fail("crossEntropy: dlogits and dlogits16 are both set; the gradient goes to one of them");
    if (a.dtype16 != DTYPE_BF16 && a.dtype16 != DTYPE_F16)
        fail("crossEntropy: dtype16 must be BF16 or F16, not dtype code " + std::to_string(a.dtype16));
    if (a.rows > 1 && a.ld16 < a.vocab)
        fail("crossEntropy: ld16 = " + std::to_string(a.ld16) + " is less than the vocabulary " + std::to_string(a.vocab));
}

void checkRoundedOutput(const char* what, const float* f32, const Rounded16& r, int64_t rows, int width) {
    if (f32 && r.data) fail(std::string(what) + ": both the f32 output and its rounded form (16) are set");
    if (!f32 && !r.data && rows > 0 && width > 0) fail(std::string(what) + ": no output (f32 or rounded) is set");
    if (!r.data) return;
    if (r.dtype != DTYPE_BF16 && r.dtype != DTYPE_F16)
        fail(std::string(what) + ": a rounded output must be BF16 or F16, not dtype code " + std::to_string(r.dtype));
    if (rows > 1 && r.ld < width)
        fail(std::string(what) + ": ld = " + std::to_string(r.ld) + " of the rounded output is less than its " +
             std::to_string(width) + " columns");
}

void checkScanBackwardOutputs(const ScanBackwardArgs& s) {
    const int64_t rows = static_cast<int64_t>(s.batch) * s.steps;
    checkRoundedOutput("selectiveScanBackward: ddt", s.ddt, s.ddt16, rows, s.channels);
    checkRoundedOutput("selectiveScanBackward: dz", s.dz, s.dz16, rows, s.channels);
}

void checkConvBackwardOutputs(const ConvBackwardArgs& c) {
    checkRoundedOutput("convSiluBackward: dx", c.dx, c.dx16, static_cast<int64_t>(c.batch) * c.steps, c.channels);
}

void checkScanOutputs(const ScanArgs& s) {
    checkRoundedOutput("selectiveScan: out", s.out, s.out16, static_cast<int64_t>(s.batch) * s.steps, s.channels);
}

void checkRmsNormOutputs(const RmsNormArgs& a) { checkRoundedOutput("rmsnorm: y", a.y, a.y16, a.rows, a.d); }

void checkConvOutputs(const ConvArgs& c) {
    if (!c.u16.data) return;
    checkRoundedOutput("convSilu: u16", nullptr, c.u16, static_cast<int64_t>(c.batch) * c.steps, c.channels);
}

void checkRoundedInput(const Gemm& g) {
    if (!g.a16) return;
    if (g.kind != GemmKind::Forward) fail("gemm: a rounded dy (a16) is taken by linearBackward only");
    if (g.w.dtype != DTYPE_BF16 && g.w.dtype != DTYPE_F16)
        fail("gemm (Forward): a rounded x (a16) needs BF16 or F16 weight storage, not dtype code " + std::to_string(g.w.dtype));
    if (g.a) fail("gemm (Forward): a rounded x (a16) with an f32 x beside it");
    if (g.keep16) fail("gemm (Forward): keep16 with an x that is already rounded (a16)");
    if (g.rows > 1 && g.lda16 < g.w.in)
        fail("gemm (Forward): lda16 = " + std::to_string(g.lda16) + " is less than the " + std::to_string(g.w.in) + " inputs");
}

}  // namespace mamba
