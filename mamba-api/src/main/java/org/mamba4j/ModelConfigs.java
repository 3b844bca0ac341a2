package org.mamba4j;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.Map;
import org.mamba4j.nativ.global.libmamba;

/**
 * Where a {@link ModelConfig} turns into something architecture-specific: the native struct a model is built
 * from, and the {@code config} object of checkpoint metadata. Each new architecture adds its case here (and
 * in the sealed interface); everything else works on {@link ModelConfig}.
 */
final class ModelConfigs {
    private ModelConfigs() {}

    /** The native struct for a model of this configuration (caller closes it). */
    static org.mamba4j.nativ.ModelConfig toNative(ModelConfig config, int inputDim, int vocabSize, boolean tieEmbeddings) {
        if (config instanceof Mamba1Config c) return c.toNative(inputDim, vocabSize, tieEmbeddings);
        if (config instanceof Mamba3Config c) return c.toNative(inputDim, vocabSize, tieEmbeddings);
        throw new AssertionError("no native conversion for " + config.getClass());
    }

    /**
     * Validates a native config against libmamba's limits (and closes it).
     *
     * @throws InvalidConfigException "invalid TYPE: " + libmamba's message naming the field
     */
    static void validate(org.mamba4j.nativ.ModelConfig n, String type) {
        try (n) {
            NativeGuard.config(() -> {
                libmamba.validateConfig(n);
                return null;
            });
        } catch (RuntimeException e) {  // validateConfig only judges the configuration
            throw new InvalidConfigException("invalid " + type + ": " + e.getMessage());
        }
    }

    /** The fields under their checkpoint-metadata names. */
    static Map<String, Object> toMetadata(ModelConfig config) {
        if (config instanceof Mamba1Config c) return c.toMap();
        if (config instanceof Mamba3Config c) return c.toMap();
        throw new AssertionError("no checkpoint metadata for " + config.getClass());
    }

    /**
     * The configuration of a checkpoint with this {@code arch} tag and {@code config} metadata object.
     *
     * @throws CheckpointException for an unknown architecture or a missing or mistyped field
     * @throws InvalidConfigException when a value is out of range
     */
    static ModelConfig fromMetadata(String arch, JsonNode c, String where) {
        if (Mamba1Config.ARCH.equals(arch))
            return Mamba1Config.builder().dModel(intField(c, "d_model", where))
                    .dState(intField(c, "d_state", where)).dConv(intField(c, "d_conv", where))
                    .expand(intField(c, "expand", where)).dtRank(intField(c, "dt_rank", where))
                    .layers(intField(c, "n_layers", where)).normEps(numField(c, "norm_eps", where))
                    .dtMin(numField(c, "dt_min", where)).dtMax(numField(c, "dt_max", where))
                    .dtInitFloor(numField(c, "dt_init_floor", where)).build();
        if (Mamba3Config.ARCH.equals(arch))
            return Mamba3Config.builder().dModel(intField(c, "d_model", where)).dState(intField(c, "d_state", where))
                    .expand(intField(c, "expand", where)).headdim(intField(c, "headdim", where))
                    .ngroups(intField(c, "ngroups", where)).layers(intField(c, "n_layers", where))
                    .chunkSize(intField(c, "chunk_size", where)).ropeFraction(numField(c, "rope_fraction", where))
                    .aFloor(numField(c, "A_floor", where)).outprojNorm(boolField(c, "is_outproj_norm", where))
                    .normEps(numField(c, "norm_eps", where)).dtMin(numField(c, "dt_min", where))
                    .dtMax(numField(c, "dt_max", where)).dtInitFloor(numField(c, "dt_init_floor", where)).build();
        throw new CheckpointException(where + ": architecture '" + arch + "' is not supported (known: " + Mamba1Config.ARCH
                + ", " + Mamba3Config.ARCH + ")");
    }

    private static int intField(JsonNode c, String key, String where) {
        JsonNode v = c.get(key);
        if (v == null || !v.canConvertToInt() || !v.isIntegralNumber())
            throw new CheckpointException(where + ": config field '" + key + "' is missing or not an integer");
        return v.intValue();
    }

    private static boolean boolField(JsonNode c, String key, String where) {
        JsonNode v = c.get(key);
        if (v == null || !v.isBoolean()) throw new CheckpointException(where + ": config field '" + key + "' is missing or not a boolean");
        return v.booleanValue();
    }

    private static double numField(JsonNode c, String key, String where) {
        JsonNode v = c.get(key);
        if (v == null || !v.isNumber()) throw new CheckpointException(where + ": config field '" + key + "' is missing or not a number");
        return v.doubleValue();
    }
}
