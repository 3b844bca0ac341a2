package org.mamba4j;

/**
 * How a model computes its matrix products — every projection of inference (in/x/dt/out, input projection, LM
 * head) and of a {@link Trainer}'s forward. Set it on {@link MambaModel.Builder#gemmMode} or
 * {@link MambaModel#setGemmMode}; a change drops captured CUDA graphs (the next step captures again).
 *
 * <p>The backward products of training are always reproducible (fixed tiles in f32 on the CPU; cuBLAS with a fixed
 * workspace on CUDA, in the weight's storage type: BF16/F16 on tensor cores with f32 accumulation into f32
 * gradients, F32 in true f32, TF32 with TF32 math except under {@link #CUBLAS_PEDANTIC}): bit-identical from run to
 * run, and on the CPU for any thread count.
 */
public enum GemmMode {
    /**
     * Our own fixed-order kernels. <b>Bit-reproducible and batch-invariant</b>: a row's output does not depend on
     * how many rows share the call, what the other rows hold, or (on the CPU) the thread count — the property that
     * makes served results reproducible and RL rollouts replayable. A decode step, a prefill and a forward compute
     * the same product bits for the same row. Two tiers, chosen by the weight's storage (never by the row count):
     * <ul>
     *   <li><b>tensor-core tier</b> (CUDA, {@link DType#BF16} / {@link DType#F16} weights): the activations are
     *       rounded to the weight type, and every output is one chain of tensor-core instructions over 16-wide
     *       slices of the input in ascending order, accumulated in f32 — no split-K chosen from the call's shape, no
     *       shape-dependent algorithm (on Hopper a deep weight — more inputs than outputs, such as x_proj and
     *       out_proj — has its input cut into 2, 4 or 8 fixed parts, a rule of the weight's shape alone, whose chains
     *       are added in part order). Its numbers are those of a bf16/f16 GEMM with f32 accumulation (not bit-equal
     *       to cuBLAS, whose summation order is its own). On Hopper it runs TMA-fed wgmma tiles, bit-equal to the
     *       mma.sync tiles of other GPUs except where the cut into parts (Hopper only) changes the order. Speed on an
     *       H200 (2026-12-04): 0.77–0.95× cuBLAS on the in_proj/out_proj products of 4,096+ rows (d_model ≥ 768),
     *       0.5–0.85× on the narrow x_proj/dt_proj ones; at ≤ 64 rows 0.6–0.9× on wide products and 1.0–1.2× on
     *       x_proj; see docs/benchmarks.md.</li>
     *   <li><b>scalar tier</b> (the CPU, and CUDA {@link DType#F32} / {@link DType#TF32} weights): f32 FMA in a
     *       fixed order, exact f32 (TF32 storage is not rounded to TF32 here). On the CPU an 8-lane order, bit-equal
     *       to a plain scalar reference; on CUDA our batch-invariant GEMV, 8 rows per weight pass — as fast as the
     *       other modes for decode, much slower for long prefills (the weights are read once per 8 rows).</li>
     * </ul>
     * No stage fusion runs in this mode (the fused rmsnorm + product of decode computes the norm differently), so
     * whole decode steps are batch-invariant: the scan, conv and norms are per-row already. The Mamba-1 CUDA scan
     * also keeps one layout and the sequential algorithm for every batch and length in this mode (the fast modes
     * switch to a wide layout from 32 steps and to a chunked scan for long prompts on small batches), so a prefill's
     * scan equals its decode steps bit for bit and does not depend on the batch. Mamba-3's CUDA prefill still uses
     * its chunked kernels for 32 steps and more: equal to its steps to f32 rounding, not bit for bit.
     *
     * <p>The cost on an H200 (BF16, graphs, 2026-12-04): a one-row decode step takes 1.2–2.0× the fast mode's (each
     * output is one chain of dependent tensor-core steps where the fast mode's GEMV splits the sum over lanes; the
     * rmsnorm and conv step ride in the 130m/370m-sized in_proj as in the fast mode, bit for bit with the ops apart),
     * a Mamba-1 prefill of 1,024–4,096 tokens 1.18–1.32× (the products; both modes' long one-row prefills walk the same
     * scan); batched decode (8–64 rows) is within 10% of the fast mode, and faster than it for the 1.4b and 2.8b shapes.
     * Not the default for the one-row and prefill costs.
     */
    DETERMINISTIC(0),
    /**
     * The fastest kernels: OpenBLAS (threaded for large products) on the CPU; on CUDA our GEMV for up to 8 rows
     * (4 for 16-bit weights) and cuBLAS above (TF32 tensor cores for {@link DType#TF32} storage). Run-to-run
     * reproducible for a fixed shape, thread count and GPU, but a row's last bits may change with the batch size.
     * The default: see {@link #DETERMINISTIC} for what that mode costs.
     */
    CUBLAS_FAST(1),
    /**
     * cuBLAS with pedantic math (no TF32 or other reduced-precision shortcuts, even for {@link DType#TF32}
     * storage); on the CPU, fixed tiles (results independent of the thread count).
     */
    CUBLAS_PEDANTIC(2);

    final int code;

    GemmMode(int code) {
        this.code = code;
    }

    static GemmMode ofCode(int code) {
        for (GemmMode m : values()) if (m.code == code) return m;
        throw new IllegalArgumentException("unknown GEMM mode code " + code);
    }
}
