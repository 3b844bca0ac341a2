package org.mamba4j;

/**
 * How a model computes its matrix products — every projection of inference (in/x/dt/out, input projection, LM
 * head) and of a {@link Trainer}'s forward. Set it on {@link MambaModel.Builder#gemmMode} or
 * {@link MambaModel#setGemmMode}; a change drops captured CUDA graphs (the next step captures again).
 *
 * <p>The backward products of training are always reproducible (fixed tiles on the CPU, true-f32 cuBLAS with a
 * fixed workspace on CUDA): bit-identical from run to run, and on the CPU for any thread count.
 */
public enum GemmMode {
    /**
     * Our own fixed-order kernels. <b>Bit-reproducible and batch-invariant</b>: a row's output does not depend on
     * how many rows share the call, what the other rows hold, or (on the CPU) the thread count — the property that
     * makes served results reproducible and RL rollouts replayable. Every dot product runs in one fixed order:
     * on the CPU an 8-lane f32 FMA order (bit-equal to a plain scalar reference); on CUDA our batch-invariant
     * GEMV, 8 rows at a time (no stage fusion, so the bits cannot depend on whether a batch was small enough to
     * fuse). This is the scalar tier: exact, as fast as the fast mode for decode, and much slower for long
     * prefills on the GPU (the weights are read once per 8 rows); a tensor-core tier is future work.
     * The scan, conv and norms are per-row already, so whole decode steps are batch-invariant in this mode.
     */
    DETERMINISTIC(0),
    /**
     * The fastest kernels: OpenBLAS (threaded for large products) on the CPU; on CUDA our GEMV for up to 8 rows and
     * cuBLAS above (TF32 tensor cores for {@link DType#TF32} storage). Run-to-run reproducible for a fixed shape,
     * thread count and GPU, but a row's last bits may change with the batch size. The default: the deterministic
     * GPU tier is far slower on prefill shapes.
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
