package org.mamba4j;

/**
 * How a model stores its weight matrices. Compute and accumulation are always f32, and so are the
 * recurrent state, the residual stream, norms, A_log and D. The CPU backend supports {@link #F32} only.
 */
public enum DType {
    /** 32-bit floats, exact f32 products. */
    F32(0),
    /** f32 storage, products on tensor cores in TF32 (CUDA only). */
    TF32(1),
    /** bfloat16 weight matrices (CUDA only). */
    BF16(2),
    /** IEEE half weight matrices (CUDA only). */
    F16(3);

    final int code;

    DType(int code) {
        this.code = code;
    }

    static DType ofCode(int code) {
        for (DType t : values()) if (t.code == code) return t;
        throw new IllegalArgumentException("unknown dtype code " + code);
    }
}
