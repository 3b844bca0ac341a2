// Plain double-precision references of every op: straightforward loops over dense row-major arrays that
// read like the math in /work/shared/reference/mamba1.md (§3, §4). No strides, no blocking, no fast math:
// the case code strips the backends' strided buffers into dense arrays before comparing.
#pragma once

#include <cstdint>
#include <vector>

namespace optest::ref {

using Vec = std::vector<double>;

double softplus(double x);   // x for x > 20 (PyTorch's threshold), else log(1 + eˣ)
double dsoftplus(double x);  // 1 for x > 20, else σ(x)
double sigmoid(double x);
double silu(double x);
double dsilu(double x);

// ---- products (W is [out, in], PyTorch layout) ----
/** y[r, o] = beta·y0[r, o] + Σ_i x[r, i]·W[o, i] + bias[o]  (bias may be empty, y0 ignored when beta = 0). */
Vec gemmForward(const Vec& x, int64_t rows, const Vec& w, int out, int in, const Vec& bias, double beta, const Vec& y0);
/** dx[r, i] = beta·dx0[r, i] + Σ_o dy[r, o]·W[o, i]. */
Vec gemmBackwardData(const Vec& dy, int64_t rows, const Vec& w, int out, int in, double beta, const Vec& dx0);
/** dw[o, i] = dw0[o, i] + Σ_r dy[r, o]·x[r, i];  dbias[o] = dbias0[o] + Σ_r dy[r, o]. */
void gemmWeightGrad(const Vec& dy, const Vec& x, int64_t rows, int out, int in, Vec& dw, Vec* dbias);

// ---- normalisation ----
/** y[r, j] = w[j]·x[r, j] / sqrt(mean_j x[r, j]² + eps). */
Vec rmsnorm(const Vec& x, int64_t rows, int d, const Vec& w, double eps);
/** ρ = 1/rms, x̂ = ρ·x, g = w ⊙ dy: dx = beta·dx0 + ρ·(g − x̂·mean(g ⊙ x̂));  dw += Σ_r dy ⊙ x̂. */
void rmsnormBackward(const Vec& x, int64_t rows, int d, const Vec& w, const Vec& dy, double eps, double beta,
                     const Vec& dx0, Vec& dx, Vec& dw);

// ---- causal depthwise conv + SiLU ----
struct ConvProblem {
    int batch = 0, steps = 0, channels = 0, width = 0;
    Vec x;        // [batch·steps, channels]
    Vec w;        // [channels, width]
    Vec bias;     // [channels]
    Vec history;  // [batch, channels, width − 1], oldest first
    /** The input at time s of row b, channel d: x for s ≥ 0, the carried history before. */
    double input(int b, int s, int d) const;
};
struct ConvResult {
    Vec pre;      // the conv output before SiLU
    Vec u;        // SiLU(pre)
    Vec history;  // the last width − 1 inputs, per row [channels, width − 1]
};
ConvResult convSilu(const ConvProblem& p);
/** Given du: dx (overwrite, the history's gradient dropped), dw += …, dbias += …. */
void convSiluBackward(const ConvProblem& p, const Vec& du, Vec& dx, Vec& dw, Vec& dbias);

// ---- the selective scan ----
struct ScanProblem {
    int batch = 0, steps = 0, channels = 0, d_state = 0;
    Vec dt;      // [R, channels] before softplus (R = batch·steps)
    Vec a;       // [channels, d_state] = −exp(A_log)
    Vec B, C;    // [R, d_state]
    Vec u, z;    // [R, channels]
    Vec d_skip;  // [channels]
    Vec h0;      // [batch, channels, d_state]
};
struct ScanResult {
    Vec out;     // [R, channels]
    Vec y;       // [R, channels]: before the gate
    Vec states;  // [batch, steps + 1, channels, d_state]: the state before step t (states[T] = final h)
    double state(const ScanProblem& p, int b, int t, int d, int n) const;
};
ScanResult selectiveScan(const ScanProblem& p);
struct ScanGrads {
    Vec ddt, dB, dC, du, dz;  // per row
    Vec da_log;               // [channels, d_state]: the gradient w.r.t. A_log (a = −exp(A_log))
    Vec dd_skip;              // [channels]
};
/** Hand-derived backward (§4), gradient of Σ dout ⊙ out; the initial state's gradient is dropped. */
ScanGrads selectiveScanBackward(const ScanProblem& p, const Vec& dout);

// ---- training utilities ----
struct AdamWStep {
    double lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2, grad_scale;
};
/** PyTorch AdamW on one element, in double: decay, moments, bias-corrected step. */
void adamw(const AdamWStep& s, double& p, double g, double& m, double& v);

/** Softmax cross-entropy of one row: the loss, whether the argmax is the target, and scale·(softmax − onehot). */
double crossEntropyRow(const double* logits, int vocab, int target, double scale, double* dlogits, bool* correct);

}  // namespace optest::ref
