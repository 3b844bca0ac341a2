package org.mamba4j;

/**
 * How a model stores its weight matrices. Compute and accumulation are always f32, and so are the
 * recurrent state, the residual stream, norms, A_log and D. BF16 and F16 keep every matrix (the token embedding
 * and the LM head included) in 2 bytes only — about half the memory of F32, and on the CPU about half the
 * memory traffic of a decode step — with f32 masters only while a {@link Trainer} needs them.
 * Every type works on the CPU and on CUDA.
 */
public enum DType {
    /** 32-bit floats, exact f32 products. */
    F32(0),
    /** f32 storage, products on tensor cores in TF32 on CUDA; on the CPU (no TF32 arithmetic) exactly {@link #F32}. */
    TF32(1),
    /** bfloat16 weight matrices (8 significant bits: relative rounding of each weight up to 2⁻⁹). */
    BF16(2),
    /** IEEE half weight matrices (11 significant bits; |w| ≥ 65520 overflows to infinity). */
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
