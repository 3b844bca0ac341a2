package org.mamba4j.lm;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.file.Path;
import java.util.Objects;
import org.mamba4j.CheckpointException;
import org.mamba4j.InvalidConfigException;
import org.mamba4j.ModelConfig;

/**
 * The architecture of a Mamba (v1) language model, read from a checkpoint's {@code config.json}.
 *
 * <p>Two layouts are understood:
 *
 * <ul>
 *   <li><b>transformers</b> ({@code MambaForCausalLM}, the {@code *-hf} checkpoints), recognised by a
 *       {@code model_type} or {@code hidden_size} key: {@code hidden_size}, {@code
 *       num_hidden_layers}, {@code vocab_size} (required); {@code state_size} (16), {@code
 *       conv_kernel} (4), {@code expand} (2), {@code intermediate_size} (must equal expand ×
 *       hidden_size when present), {@code time_step_rank} (an integer or {@code "auto"} = ⌈hidden /
 *       16⌉, the default), {@code layer_norm_epsilon} or {@code rms_norm_eps} (1e-5), {@code
 *       use_bias} (false, as in transformers; true is rejected), {@code use_conv_bias} (true),
 *       {@code pad_vocab_size_multiple} (8), {@code tie_word_embeddings} (true), {@code hidden_act}
 *       ("silu"), {@code residual_in_fp32} (true).
 *   <li><b>state-spaces</b> ({@code mamba_ssm}'s {@code MambaLMHeadModel}), recognised by the absence
 *       of both keys above: {@code d_model}, {@code n_layer}, {@code vocab_size} (required); {@code
 *       ssm_cfg} {d_state (16), d_conv (4), expand (2), dt_rank ("auto"), conv_bias (true), bias
 *       (false)}, {@code rms_norm} (true; false is rejected), {@code norm_epsilon} (1e-5), {@code
 *       tie_embeddings} (true), {@code pad_vocab_size_multiple} (8), {@code residual_in_fp32}, {@code
 *       d_intermediate} (0; a gated MLP is rejected).
 * </ul>
 *
 * <p>A state-spaces config whose {@code ssm_cfg.layer} is {@code "Mamba3"} is a Mamba-3 model: it is refused here
 * with a pointer to {@link Mamba3LMConfig}, which reads it ({@link MambaLM#fromPretrained} picks the right reader).
 *
 * <p>{@link #paddedVocab()} is the number of rows of the embedding (and of the LM head) stored in the
 * checkpoint. {@code mamba_ssm} pads {@code vocab_size} up to a multiple of {@code
 * pad_vocab_size_multiple} (50277 → 50280); transformers uses {@code vocab_size} as it is (the
 * {@code -hf} conversions store the padded 50280). So for the transformers layout, when {@code
 * vocab_size} is not a multiple of {@code pad_vocab_size_multiple}, {@link #padVocabMultiple()} is
 * reported as 1.
 *
 * <p>Everything that does not fit is rejected with {@link CheckpointException} naming the file and
 * the key: JSON that does not parse (or repeats a key), missing required keys, wrong types,
 * non-positive sizes or sizes beyond libmamba's limits (d_model, layers, vocabulary, d_state, d_conv and
 * expand are checked against {@link ModelConfig#limitMax(String)}, the table the model builders use, so the
 * two cannot drift), another {@code model_type}, biases on
 * the in/out projections, LayerNorm instead of RMSNorm, an activation other than SiLU, and an {@code
 * intermediate_size} that disagrees with {@code expand}.
 *
 * @param dModel model width ({@code hidden_size} / {@code d_model})
 * @param nLayers number of Mamba blocks
 * @param dState SSM state size per channel
 * @param dConv depthwise causal convolution width
 * @param expand inner width factor
 * @param dInner {@code expand * dModel}
 * @param dtRank rank of the Δ projection
 * @param vocabSize {@code vocab_size} exactly as in the file
 * @param padVocabMultiple multiple the embedding rows are padded to (see above)
 * @param normEps RMSNorm epsilon
 * @param tieEmbeddings whether the LM head shares the embedding matrix
 * @param useConvBias whether the depthwise convolution has a bias
 */
public record HfMambaConfig(
        int dModel,
        int nLayers,
        int dState,
        int dConv,
        int expand,
        int dInner,
        int dtRank,
        int vocabSize,
        int padVocabMultiple,
        double normEps,
        boolean tieEmbeddings,
        boolean useConvBias) {

    /** Largest {@code pad_vocab_size_multiple} accepted: a sanity bound of the file format, not a model limit. */
    public static final int MAX_PAD_MULTIPLE = 65_536;

    /** libmamba's limits, read once on first use (the numbers live in one table, in C++). */
    private static final class Limits {
        static final int D_MODEL_MIN = min("dModel"), D_MODEL_MAX = max("dModel");
        static final int LAYERS_MIN = min("layers"), LAYERS_MAX = max("layers");
        static final int D_STATE_MIN = min("dState"), D_STATE_MAX = max("dState");
        static final int D_CONV_MIN = min("dConv"), D_CONV_MAX = max("dConv");
        static final int EXPAND_MIN = min("expand"), EXPAND_MAX = max("expand");
        static final int VOCAB_MAX = max("vocabSize");  // at least 1: an LM has a vocabulary

        private static int min(String field) {
            return Math.toIntExact(ModelConfig.limitMin(field));
        }

        private static int max(String field) {
            return Math.toIntExact(ModelConfig.limitMax(field));
        }
    }

    /** Checks the invariants; {@link #read} and {@link #parse} report violations per key first. */
    public HfMambaConfig {
        check("dModel", dModel, Limits.D_MODEL_MIN, Limits.D_MODEL_MAX);
        check("nLayers", nLayers, Limits.LAYERS_MIN, Limits.LAYERS_MAX);
        check("dState", dState, Limits.D_STATE_MIN, Limits.D_STATE_MAX);
        check("dConv", dConv, Limits.D_CONV_MIN, Limits.D_CONV_MAX);
        check("expand", expand, Limits.EXPAND_MIN, Limits.EXPAND_MAX);
        if ((long) expand * dModel != dInner) {
            throw new InvalidConfigException(
                    "dInner must equal expand * dModel = " + (long) expand * dModel + ", got " + dInner);
        }
        check("dtRank", dtRank, 1, dInner);
        check("vocabSize", vocabSize, 1, Limits.VOCAB_MAX);
        check("padVocabMultiple", padVocabMultiple, 1, MAX_PAD_MULTIPLE);
        if (!(normEps > 0.0 && normEps < 1.0)) {
            throw new InvalidConfigException("normEps must be in (0, 1), got " + normEps);
        }
    }

    private static void check(String field, int value, int min, int max) {
        if (value < min || value > max) {
            throw new InvalidConfigException(
                    field + " must be in [" + min + ", " + max + "], got " + value);
        }
    }

    /** {@link #vocabSize()} rounded up to a multiple of {@link #padVocabMultiple()}: the embedding rows. */
    public int paddedVocab() {
        long m = padVocabMultiple;
        return (int) ((vocabSize + m - 1) / m * m);
    }

    /**
     * Reads a {@code config.json}, or the {@code config.json} inside a folder.
     *
     * @throws CheckpointException when the file is missing, unreadable, or not a supported Mamba config
     */
    public static HfMambaConfig read(Path configJson) {
        Objects.requireNonNull(configJson, "configJson");
        Path file = JsonKeys.configFile(configJson);
        return parse(JsonKeys.readText(file), file.toString());
    }

    /**
     * Parses the text of a {@code config.json}.
     *
     * @param json the file's text
     * @param sourceName what to call it in error messages (usually its path)
     * @throws CheckpointException when it is not a supported Mamba config
     */
    public static HfMambaConfig parse(String json, String sourceName) {
        Objects.requireNonNull(json, "json");
        String source = sourceName == null ? "config.json" : sourceName;
        JsonKeys keys = JsonKeys.parseObject(json, source);
        JsonNode root = keys.root;
        try {
            if (root.has("model_type") || root.has("hidden_size")) {
                return parseTransformers(keys);
            }
            if (root.has("d_model")) {
                return parseStateSpaces(keys);
            }
            throw keys.fail(
                    "missing required key 'hidden_size' (transformers layout) or 'd_model' (state-spaces"
                            + " layout)");
        } catch (InvalidConfigException e) {
            throw new CheckpointException(source + ": " + e.getMessage(), e);
        }
    }

    private static HfMambaConfig parseTransformers(JsonKeys k) {
        String modelType = k.optString("model_type", "mamba");
        switch (modelType) {
            case "mamba":
                break;
            case "falcon_mamba":
                throw k.fail(
                        "'model_type' \"falcon_mamba\" is not supported: FalconMamba applies extra RMS norms"
                                + " to B, C and dt inside the mixer, which are not implemented");
            case "mamba2":
                throw k.fail("'model_type' \"mamba2\" is not supported: only Mamba (v1) mixers are implemented");
            default:
                throw k.fail("'model_type' must be \"mamba\", got \"" + modelType + '"');
        }
        int dModel = k.reqInt("hidden_size", Limits.D_MODEL_MIN, Limits.D_MODEL_MAX);
        int nLayers = k.root.has("num_hidden_layers") || !k.root.has("n_layer")
                ? k.reqInt("num_hidden_layers", Limits.LAYERS_MIN, Limits.LAYERS_MAX)
                : k.reqInt("n_layer", Limits.LAYERS_MIN, Limits.LAYERS_MAX);
        int vocab = k.reqInt("vocab_size", 1, Limits.VOCAB_MAX);
        int dState = k.optInt("state_size", 16, Limits.D_STATE_MIN, Limits.D_STATE_MAX);
        int dConv = k.optInt("conv_kernel", 4, Limits.D_CONV_MIN, Limits.D_CONV_MAX);
        int expand;
        int dInner;
        if (k.root.has("expand")) {
            expand = k.optInt("expand", 2, Limits.EXPAND_MIN, Limits.EXPAND_MAX);
            dInner = expand * dModel;
            if (k.root.has("intermediate_size")) {
                int intermediate = k.optInt("intermediate_size", dInner, 1, Integer.MAX_VALUE);
                if (intermediate != dInner) {
                    throw k.fail(
                            "'intermediate_size' " + intermediate + " disagrees with expand * hidden_size = "
                                    + expand + " * " + dModel + " = " + dInner);
                }
            }
        } else if (k.root.has("intermediate_size")) {
            int intermediate = k.optInt("intermediate_size", 0, 1, Integer.MAX_VALUE);
            if (intermediate % dModel != 0 || intermediate / dModel < Limits.EXPAND_MIN
                    || intermediate / dModel > Limits.EXPAND_MAX) {
                throw k.fail(
                        "'intermediate_size' " + intermediate + " is not an integer multiple in [" + Limits.EXPAND_MIN
                                + ", " + Limits.EXPAND_MAX + "] of hidden_size " + dModel + " (expand is missing)");
            }
            expand = intermediate / dModel;
            dInner = intermediate;
        } else {
            expand = 2;
            dInner = 2 * dModel;
        }
        int dtRank = k.dtRank("time_step_rank", dModel, dInner);
        double eps = k.root.has("layer_norm_epsilon") || !k.root.has("rms_norm_eps")
                ? k.optEps("layer_norm_epsilon")
                : k.optEps("rms_norm_eps");
        if (k.optBool("use_bias", false)) {
            throw k.fail("'use_bias' is true: in_proj/out_proj biases are not supported");
        }
        boolean convBias = k.optBool("use_conv_bias", true);
        int pad = k.optInt("pad_vocab_size_multiple", 8, 1, MAX_PAD_MULTIPLE);
        boolean tie = k.optBool("tie_word_embeddings", true);
        String act = k.optString("hidden_act", "silu");
        if (!act.equals("silu") && !act.equals("swish")) {
            throw k.fail("'hidden_act' must be \"silu\", got \"" + act + '"');
        }
        k.optBool("residual_in_fp32", true);
        if (vocab % pad != 0) {
            pad = 1; // transformers does not pad: the embedding has exactly vocab_size rows
        }
        return new HfMambaConfig(dModel, nLayers, dState, dConv, expand, dInner, dtRank, vocab, pad, eps, tie,
                convBias);
    }

    private static HfMambaConfig parseStateSpaces(JsonKeys k) {
        int dModel = k.reqInt("d_model", Limits.D_MODEL_MIN, Limits.D_MODEL_MAX);
        int nLayers = k.reqInt("n_layer", Limits.LAYERS_MIN, Limits.LAYERS_MAX);
        int vocab = k.reqInt("vocab_size", 1, Limits.VOCAB_MAX);
        int pad = k.optInt("pad_vocab_size_multiple", 8, 1, MAX_PAD_MULTIPLE);
        if (!k.optBool("rms_norm", true)) {
            throw k.fail("'rms_norm' is false: LayerNorm models are not supported, only RMSNorm");
        }
        boolean tie = k.optBool("tie_embeddings", true);
        k.optBool("residual_in_fp32", true);
        double eps = k.optEps("norm_epsilon");
        JsonNode attn = k.root.get("attn_layer_idx");
        if (attn != null && !attn.isNull() && !(attn.isArray() && attn.isEmpty())) {
            throw k.fail("'attn_layer_idx' is set: hybrid models with attention layers are not supported");
        }
        int dIntermediate = k.optInt("d_intermediate", 0, 0, Integer.MAX_VALUE);
        if (dIntermediate != 0) {
            throw k.fail("'d_intermediate' is " + dIntermediate + ": the gated MLP after each mixer is not supported"
                    + " (only d_intermediate = 0)");
        }

        JsonKeys ssm = k.child("ssm_cfg");
        String layer = ssm.optString("layer", "Mamba1");
        if (layer.equals("Mamba3")) {
            throw ssm.fail("'layer' is \"Mamba3\": this is a Mamba-3 model, read its config.json with"
                    + " Mamba3LMConfig.read (MambaLM.fromPretrained and the command line detect it)");
        }
        if (!layer.equals("Mamba1")) {
            throw ssm.fail("'layer' must be \"Mamba1\", got \"" + layer + "\": only Mamba (v1) mixers are"
                    + " implemented");
        }
        int dState = ssm.optInt("d_state", 16, Limits.D_STATE_MIN, Limits.D_STATE_MAX);
        int dConv = ssm.optInt("d_conv", 4, Limits.D_CONV_MIN, Limits.D_CONV_MAX);
        int expand = ssm.optInt("expand", 2, Limits.EXPAND_MIN, Limits.EXPAND_MAX);
        int dInner = expand * dModel;
        int dtRank = ssm.dtRank("dt_rank", dModel, dInner);
        boolean convBias = ssm.optBool("conv_bias", true);
        if (ssm.optBool("bias", false)) {
            throw ssm.fail("'bias' is true: in_proj/out_proj biases are not supported");
        }
        long padded = ((long) vocab + pad - 1) / pad * pad;
        if (padded > Limits.VOCAB_MAX) {
            throw k.fail("'vocab_size' " + vocab + " padded to a multiple of " + pad + " exceeds " + Limits.VOCAB_MAX);
        }
        return new HfMambaConfig(dModel, nLayers, dState, dConv, expand, dInner, dtRank, vocab, pad, eps, tie,
                convBias);
    }
}
