// CPU implementations of the training stages declared at the end of Backend (backend.h). CpuBackend's
// overrides forward here; the code lives in cpu_backward.cpp. Every reduction over batch rows, time
// steps or channel blocks runs in a fixed order, and every matrix product is cut into fixed tiles each
// computed by single-threaded OpenBLAS, so results are bit-identical for any thread count.
#pragma once

#include "../common/backend.h"

namespace mamba::cpu {

void linearDeterministic(const float* x, int64_t ldx, int64_t rows, const Matrix& w, const float* bias, float* y,
                         int64_t ldy, float beta);
void linearBackward(const float* dy, int64_t lddy, int64_t rows, const Matrix& w, float* dx, int64_t lddx, float beta);
void linearWeightGrad(const float* dy, int64_t lddy, const float* x, int64_t ldx, int64_t rows, int out, int in,
                      float* dw, float* dbias);
void rmsnormBackward(const float* x, int64_t ldx, const float* w, const float* dy, int64_t lddy, int64_t rows, int d,
                     float eps, float* dx, int64_t lddx, float beta, float* dw);
void convSiluBackward(const ConvBackwardArgs& args);
void selectiveScanTrain(const ScanArgs& args, float* checkpoints, int chunk);
void selectiveScanBackward(const ScanBackwardArgs& args);
void scale(float* x, int64_t n, float s);
double sumOfSquares(const float* x, int64_t n);
void adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWArgs& args);
double mse(const float* y, const float* target, int64_t n, float scale, float* dy);
void crossEntropy(const float* logits, int64_t rows, int vocab, const int32_t* targets, int ignore_index, float scale,
                  float* loss, float* correct, float* dlogits);

}  // namespace mamba::cpu
