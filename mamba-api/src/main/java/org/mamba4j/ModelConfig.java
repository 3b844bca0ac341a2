package org.mamba4j;

import org.mamba4j.nativ.global.libmamba;

/**
 * The hyper-parameters of a model's architecture: what {@link MambaModel#builder(ModelConfig)} builds and
 * {@link MambaModel#config()} returns. Each architecture has its own immutable, validated implementation
 * ({@link Mamba1Config}, {@link Mamba3Config}); this interface holds what every one of them offers.
 *
 * <p>The integer limits are libmamba's, the one table the builders validate against:
 * {@link #limitMin(String)} and {@link #limitMax(String)} read it for other formats (a HuggingFace
 * {@code config.json}) to quote rather than copy.
 */
public sealed interface ModelConfig permits Mamba1Config, Mamba3Config {
    /** The architecture tag stored in checkpoints, e.g. {@code "mamba1"}. */
    String arch();

    /** The model (residual stream) width d_model: floats per output position. */
    int dModel();

    /** The number of blocks. */
    int layers();

    /**
     * The smallest value libmamba accepts for an integer configuration field: {@code "dModel"}, {@code "dState"},
     * {@code "dConv"}, {@code "expand"}, {@code "dInner"}, {@code "layers"}, {@code "inputDim"}, {@code "dtRank"},
     * {@code "vocabSize"}, and for Mamba-3 {@code "headdim"}, {@code "ngroups"}, {@code "chunkSize"} and
     * {@code "headState"} (headdim·dState).
     *
     * @throws IllegalArgumentException for any other name
     */
    static long limitMin(String field) {
        Native.load();
        return NativeGuard.call(() -> libmamba.configFieldMin(java.util.Objects.requireNonNull(field, "field")));
    }

    /** The largest value libmamba accepts for an integer configuration field (names as in {@link #limitMin}). */
    static long limitMax(String field) {
        Native.load();
        return NativeGuard.call(() -> libmamba.configFieldMax(java.util.Objects.requireNonNull(field, "field")));
    }
}
