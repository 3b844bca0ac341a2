// Double-precision reference of the Mamba-3 SISO scan (Ops::mamba3Scan, Ops::mamba3ScanBackward): plain loops
// that read like /work/shared/reference/mamba3-siso.md §3 (forward) and §4 (backward). Dense row-major arrays,
// no strides; the case code strips the backends' strided buffers before comparing.
//
// One deliberate difference from the f32 backends: the angles use the exact π and wrap at the exact 2π (the
// backends use the f32 constants 3.14159265f and 6.28318531f), so the reference is smooth across a wrap and
// central differences work there; the two differ by ~1e-7 rad per wrap, far inside the f32 tolerances.
#pragma once

#include "reference.h"

namespace optest::ref {

/** The inputs of one mamba3Scan call (and its backward), dense. */
struct Mamba3Problem {
    int batch = 0, steps = 0, nheads = 0, headdim = 0, d_state = 0, ngroups = 1, nangles = 0;
    double a_floor = 1e-4;
    Vec proj;       // [batch·steps, projWidth()]: [z | x | B | C | dd_dt | dd_A | trap | angles]
    Vec dt_bias;    // [nheads]
    Vec b_bias;     // [nheads, d_state]
    Vec c_bias;     // [nheads, d_state]
    Vec b_norm;     // [d_state]
    Vec c_norm;     // [d_state]
    Vec d_skip;     // [nheads]
    Vec gate_norm;  // [nheads·headdim], or empty: the plain SiLU gate
    Vec state0;     // [batch, stateSize()]: S, k_prev, v_prev, θ (the Mamba3ScanArgs layout)

    int dInner() const { return nheads * headdim; }
    int zCol() const { return 0; }
    int xCol() const { return dInner(); }
    int bCol() const { return 2 * dInner(); }
    int cCol() const { return 2 * dInner() + ngroups * d_state; }
    int dtCol() const { return 2 * dInner() + 2 * ngroups * d_state; }
    int aCol() const { return dtCol() + nheads; }
    int trapCol() const { return dtCol() + 2 * nheads; }
    int angleCol() const { return dtCol() + 3 * nheads; }
    int projWidth() const { return angleCol() + nangles; }
    int64_t kOffset() const { return static_cast<int64_t>(nheads) * headdim * d_state; }
    int64_t vOffset() const { return kOffset() + static_cast<int64_t>(nheads) * d_state; }
    int64_t angleOffset() const { return vOffset() + static_cast<int64_t>(nheads) * headdim; }
    int64_t stateSize() const { return angleOffset() + static_cast<int64_t>(nheads) * nangles; }
    int64_t rows() const { return static_cast<int64_t>(batch) * steps; }
};

struct Mamba3Result {
    Vec out;          // [batch·steps, dInner]: the gated output
    Vec y;            // [batch·steps, dInner]: before the gate
    Vec state;        // [batch, stateSize]: the final state
    Vec checkpoints;  // with chunk > 0: the states before steps 0, chunk, 2·chunk, … ([batch][chunks][stateSize])
};
/** The forward (heads are independent given the inputs, so it runs head by head: memory O(one head's state)). */
Mamba3Result mamba3Scan(const Mamba3Problem& p, int chunk = 0);

struct Mamba3Grads {
    Vec dproj;  // [batch·steps, projWidth()], every field
    Vec d_dt_bias, d_b_bias, d_c_bias, d_b_norm, d_c_norm, d_d_skip, d_gate_norm;  // d_gate_norm empty without gate norm
};
/** Hand-derived backward (§4): the gradient of Σ dout ⊙ out; the starting state's gradient is dropped. */
Mamba3Grads mamba3ScanBackward(const Mamba3Problem& p, const Vec& dout);

}  // namespace optest::ref

namespace optest {
struct SelfCheck;
/** Central-difference and state-handoff checks of the Mamba-3 reference (reference_mamba3.cpp). */
std::vector<SelfCheck> mamba3SelfChecks();
}  // namespace optest
