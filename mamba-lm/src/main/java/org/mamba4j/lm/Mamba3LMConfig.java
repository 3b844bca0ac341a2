package org.mamba4j.lm;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import org.mamba4j.CheckpointException;
import org.mamba4j.InvalidConfigException;
import org.mamba4j.Mamba3Config;
import org.mamba4j.ModelConfig;

/**
 * A Mamba-3 SISO language model's {@code config.json} in the official state-spaces/mamba layout: the
 * {@code MambaConfig} of {@code mamba_ssm} that {@code MambaLMHeadModel} is built from, with
 * {@code ssm_cfg.layer = "Mamba3"}. A folder with such a config.json and a {@code model.safetensors} holding the
 * official tensor names ({@code backbone.embedding.weight}, {@code backbone.layers.N.mixer.in_proj.weight}, …)
 * loads with {@link MambaLM#fromPretrained} and is written by {@link MambaLM#saveOfficial}.
 *
 * <p>Keys read (defaults in parentheses, the official ones):
 *
 * <ul>
 *   <li>top level: {@code d_model}, {@code n_layer}, {@code vocab_size} (required); {@code d_intermediate} (0;
 *       anything else is rejected: the gated MLP is not implemented), {@code attn_layer_idx} (must be empty),
 *       {@code attn_cfg} (ignored when there are no attention layers), {@code rms_norm} (true; false is rejected),
 *       {@code residual_in_fp32} (true), {@code fused_add_norm} (true), {@code pad_vocab_size_multiple} (8),
 *       {@code tie_embeddings} (true), and, not part of the official {@code MambaConfig} but accepted as in the
 *       Mamba-1 reader, {@code norm_epsilon} (1e-5). Other top-level keys are ignored.
 *   <li>{@code ssm_cfg}: {@code layer} ("Mamba3"), {@code d_state} (128), {@code expand} (2), {@code headdim} (64),
 *       {@code ngroups} (1), {@code rope_fraction} (0.5; 0.5 or 1), {@code A_floor} (1e-4), {@code dt_min}
 *       (0.001), {@code dt_max} (0.1), {@code dt_init_floor} (1e-4), {@code chunk_size} (64), {@code
 *       is_outproj_norm} (false); {@code is_mimo} must be false (MIMO is not implemented); {@code mimo_rank},
 *       {@code fuse_pregate_headwise_norm} and {@code dropout} are accepted and have no effect (the official
 *       module ignores them for SISO). Any other {@code ssm_cfg} key is rejected: it may be an option this
 *       implementation does not know, which could change the model's math.
 * </ul>
 *
 * <p>Every violation is a {@link CheckpointException} naming the file and the key: JSON that does not parse
 * (or repeats a key), missing required keys, wrong types, values out of range (the integer limits are libmamba's,
 * read through {@link ModelConfig#limitMax(String)}), and the official module's own assertions ({@code
 * headdim} divides {@code expand·d_model}, {@code rope_fraction} ∈ {0.5, 1}, at least one rotary angle).
 *
 * <p>{@link #paddedVocab()} is the number of rows of the embedding (and of the LM head): {@code vocab_size}
 * rounded up to a multiple of {@code pad_vocab_size_multiple}, as {@code MambaLMHeadModel} does.
 *
 * @param config the backbone's hyper-parameters (block norm epsilon: 1e-5 unless {@code norm_epsilon} is set)
 * @param vocabSize {@code vocab_size} exactly as in the file (the real vocabulary)
 * @param padVocabMultiple {@code pad_vocab_size_multiple}
 * @param tieEmbeddings {@code tie_embeddings}: whether the LM head shares the embedding matrix
 * @param residualInFp32 {@code residual_in_fp32} (mamba4j always keeps the residual in f32; recorded for saving)
 * @param fusedAddNorm {@code fused_add_norm} (a kernel choice of the official code with the same math; recorded
 *     for saving)
 */
public record Mamba3LMConfig(
        Mamba3Config config,
        int vocabSize,
        int padVocabMultiple,
        boolean tieEmbeddings,
        boolean residualInFp32,
        boolean fusedAddNorm) {

    /** Largest {@code pad_vocab_size_multiple} accepted: a sanity bound of the file format, not a model limit. */
    public static final int MAX_PAD_MULTIPLE = HfMambaConfig.MAX_PAD_MULTIPLE;

    /** The block norm epsilon of the official model (MixerModel's default; MambaConfig has no field for it). */
    static final float OFFICIAL_NORM_EPS = 1e-5f;

    /** ssm_cfg keys the official SISO module accepts without effect. */
    private static final Set<String> IGNORED_SSM_KEYS = Set.of("mimo_rank", "fuse_pregate_headwise_norm", "dropout");
    /** ssm_cfg keys that set a field. */
    private static final Set<String> SSM_KEYS = Set.of("layer", "d_state", "expand", "headdim", "ngroups",
            "rope_fraction", "A_floor", "dt_min", "dt_max", "dt_init_floor", "chunk_size", "is_outproj_norm", "is_mimo");

    /** libmamba's limits, read once on first use. */
    private static final class Limits {
        static final int D_MODEL_MIN = min("dModel"), D_MODEL_MAX = max("dModel");
        static final int LAYERS_MIN = min("layers"), LAYERS_MAX = max("layers");
        static final int D_STATE_MIN = min("dState"), D_STATE_MAX = max("dState");
        static final int EXPAND_MIN = min("expand"), EXPAND_MAX = max("expand");
        static final int D_INNER_MAX = max("dInner");
        static final int HEADDIM_MIN = min("headdim"), HEADDIM_MAX = max("headdim");
        static final int NGROUPS_MIN = min("ngroups"), NGROUPS_MAX = max("ngroups");
        static final int CHUNK_MIN = min("chunkSize"), CHUNK_MAX = max("chunkSize");
        static final int HEAD_STATE_MAX = max("headState");
        static final int VOCAB_MAX = max("vocabSize");

        private static int min(String field) {
            return Math.toIntExact(ModelConfig.limitMin(field));
        }

        private static int max(String field) {
            return Math.toIntExact(ModelConfig.limitMax(field));
        }
    }

    /**
     * Checks the invariants: a configuration, a vocabulary in [1, libmamba's maximum] that stays within it once
     * padded, a padding multiple in [1, {@link #MAX_PAD_MULTIPLE}], and at least one rotary angle (the official
     * module asserts it).
     *
     * @throws InvalidConfigException naming the field that is out of range
     */
    public Mamba3LMConfig {
        Objects.requireNonNull(config, "config");
        if (vocabSize < 1 || vocabSize > Limits.VOCAB_MAX)
            throw new InvalidConfigException("vocabSize must be in [1, " + Limits.VOCAB_MAX + "], got " + vocabSize);
        if (padVocabMultiple < 1 || padVocabMultiple > MAX_PAD_MULTIPLE)
            throw new InvalidConfigException("padVocabMultiple must be in [1, " + MAX_PAD_MULTIPLE + "], got " + padVocabMultiple);
        long padded = ((long) vocabSize + padVocabMultiple - 1) / padVocabMultiple * padVocabMultiple;
        if (padded > Limits.VOCAB_MAX)
            throw new InvalidConfigException("vocabSize " + vocabSize + " padded to a multiple of " + padVocabMultiple
                    + " exceeds " + Limits.VOCAB_MAX);
        if (config.ropeAngles() < 1)
            throw new InvalidConfigException("dState " + config.dState() + " with ropeFraction " + config.ropeFraction()
                    + " gives no rotary angle; the official Mamba3 needs at least one (dState >= " + (config.ropeFraction() == 1f ? 2 : 4) + ")");
    }

    /** {@link #vocabSize()} rounded up to a multiple of {@link #padVocabMultiple()}: the embedding rows. */
    public int paddedVocab() {
        long m = padVocabMultiple;
        return (int) ((vocabSize + m - 1) / m * m);
    }

    /**
     * Whether a {@code config.json} (or the one inside a folder) declares a Mamba-3 model ({@code ssm_cfg.layer
     * == "Mamba3"}). False for a file that is missing, unreadable or not JSON: the Mamba-1 reader, {@link
     * HfMambaConfig#read}, then reports what is wrong with it.
     */
    public static boolean isMamba3(Path configJson) {
        Objects.requireNonNull(configJson, "configJson");
        Path file = JsonKeys.configFile(configJson);
        try {
            return JsonKeys.isMamba3(JsonKeys.parseObject(JsonKeys.readText(file), file.toString()).root);
        } catch (CheckpointException e) {
            return false;
        }
    }

    /**
     * Reads a {@code config.json}, or the {@code config.json} inside a folder.
     *
     * @throws CheckpointException when the file is missing, unreadable, or not a supported Mamba-3 config
     */
    public static Mamba3LMConfig read(Path configJson) {
        Objects.requireNonNull(configJson, "configJson");
        Path file = JsonKeys.configFile(configJson);
        return parse(JsonKeys.readText(file), file.toString());
    }

    /**
     * Parses the text of a {@code config.json}.
     *
     * @param json the file's text
     * @param sourceName what to call it in error messages (usually its path); null reads as "config.json"
     * @throws CheckpointException when it is not a supported Mamba-3 config, naming the offending key
     */
    public static Mamba3LMConfig parse(String json, String sourceName) {
        Objects.requireNonNull(json, "json");
        String source = sourceName == null ? "config.json" : sourceName;
        JsonKeys k = JsonKeys.parseObject(json, source);
        try {
            return parse(k);
        } catch (InvalidConfigException e) {
            throw new CheckpointException(source + ": " + e.getMessage(), e);
        }
    }

    private static Mamba3LMConfig parse(JsonKeys k) {
        if (!JsonKeys.isMamba3(k.root)) {
            JsonNode ssm = k.root.get("ssm_cfg");
            throw k.fail("not a Mamba-3 config: 'ssm_cfg' must be an object with \"layer\": \"Mamba3\", got "
                    + (ssm == null ? "none" : JsonKeys.kind(ssm)));
        }
        int dModel = k.reqInt("d_model", Limits.D_MODEL_MIN, Limits.D_MODEL_MAX);
        int nLayers = k.reqInt("n_layer", Limits.LAYERS_MIN, Limits.LAYERS_MAX);
        int vocab = k.reqInt("vocab_size", 1, Limits.VOCAB_MAX);
        int dIntermediate = k.optInt("d_intermediate", 0, 0, Integer.MAX_VALUE);
        if (dIntermediate != 0)
            throw k.fail("'d_intermediate' is " + dIntermediate + ": the gated MLP after each mixer is not supported"
                    + " (only d_intermediate = 0)");
        JsonNode attn = k.root.get("attn_layer_idx");
        if (attn != null && !attn.isNull() && !(attn.isArray() && attn.isEmpty()))
            throw k.fail("'attn_layer_idx' is set: hybrid models with attention layers are not supported");
        JsonNode attnCfg = k.root.get("attn_cfg");
        if (attnCfg != null && !attnCfg.isNull() && !attnCfg.isObject())
            throw k.fail("'attn_cfg' must be an object, got " + JsonKeys.kind(attnCfg));
        if (!k.optBool("rms_norm", true))
            throw k.fail("'rms_norm' is false: LayerNorm models are not supported, only RMSNorm");
        boolean residualInFp32 = k.optBool("residual_in_fp32", true);
        boolean fusedAddNorm = k.optBool("fused_add_norm", true);
        int pad = k.optInt("pad_vocab_size_multiple", 8, 1, MAX_PAD_MULTIPLE);
        boolean tie = k.optBool("tie_embeddings", true);
        double eps = k.optEps("norm_epsilon");
        long padded = ((long) vocab + pad - 1) / pad * pad;
        if (padded > Limits.VOCAB_MAX)
            throw k.fail("'vocab_size' " + vocab + " padded to a multiple of " + pad + " exceeds " + Limits.VOCAB_MAX);

        JsonKeys ssm = k.child("ssm_cfg");
        for (String key : ssm.keys())
            if (!SSM_KEYS.contains(key) && !IGNORED_SSM_KEYS.contains(key))
                throw ssm.fail("'" + key + "' is not a Mamba3 option mamba4j implements (known: " + String.join(", ",
                        List.of("d_state", "expand", "headdim", "ngroups", "rope_fraction", "A_floor", "dt_min", "dt_max",
                                "dt_init_floor", "chunk_size", "is_outproj_norm", "is_mimo")) + ")");
        if (ssm.optBool("is_mimo", false))
            throw ssm.fail("'is_mimo' is true: Mamba-3 MIMO is not supported, only SISO");
        ssm.optInt("mimo_rank", 4, 1, Integer.MAX_VALUE);
        ssm.optBool("fuse_pregate_headwise_norm", true);
        ssm.optNumber("dropout", 0);
        int dState = ssm.optInt("d_state", 128, Limits.D_STATE_MIN, Limits.D_STATE_MAX);
        int expand = ssm.optInt("expand", 2, Limits.EXPAND_MIN, Limits.EXPAND_MAX);
        int headdim = ssm.optInt("headdim", 64, Limits.HEADDIM_MIN, Limits.HEADDIM_MAX);
        int ngroups = ssm.optInt("ngroups", 1, Limits.NGROUPS_MIN, Limits.NGROUPS_MAX);
        int chunk = ssm.optInt("chunk_size", 64, Limits.CHUNK_MIN, Limits.CHUNK_MAX);
        double ropeFraction = ssm.optNumber("rope_fraction", 0.5);
        if (ropeFraction != 0.5 && ropeFraction != 1.0)
            throw ssm.fail("'rope_fraction' must be 0.5 or 1.0, got " + ssm.present("rope_fraction"));
        double aFloor = ssm.optNumberOpen("A_floor", 1e-4, 0, 1);
        double dtMin = ssm.optNumberOpen("dt_min", 0.001, 0, 100);
        double dtMax = ssm.optNumberOpen("dt_max", 0.1, 0, 100);
        if (dtMin > dtMax) throw ssm.fail("'dt_min' " + dtMin + " must not exceed dt_max " + dtMax);
        double dtInitFloor = ssm.optNumberOpen("dt_init_floor", 1e-4, 0, 1);
        boolean outprojNorm = ssm.optBool("is_outproj_norm", false);

        long dInner = (long) expand * dModel;
        if (dInner > Limits.D_INNER_MAX)
            throw ssm.fail("'expand' " + expand + " × d_model " + dModel + " = " + dInner + " exceeds the inner width limit "
                    + Limits.D_INNER_MAX);
        if (dInner % headdim != 0)
            throw ssm.fail("'headdim' " + headdim + " must divide expand × d_model = " + dInner);
        long nheads = dInner / headdim;
        if (nheads % ngroups != 0)
            throw ssm.fail("'ngroups' " + ngroups + " must divide the number of heads expand × d_model / headdim = " + nheads);
        if ((long) headdim * dState > Limits.HEAD_STATE_MAX)
            throw ssm.fail("'headdim' × 'd_state' = " + headdim + " × " + dState + " exceeds " + Limits.HEAD_STATE_MAX
                    + " (one head's state)");
        Mamba3Config config = Mamba3Config.builder().dModel(dModel).layers(nLayers).dState(dState).expand(expand)
                .headdim(headdim).ngroups(ngroups).chunkSize(chunk).ropeFraction(ropeFraction).aFloor(aFloor)
                .dtMin(dtMin).dtMax(dtMax).dtInitFloor(dtInitFloor).outprojNorm(outprojNorm).normEps(eps).build();
        if (config.ropeAngles() < 1)
            throw ssm.fail("'d_state' " + dState + " with rope_fraction " + ropeFraction
                    + " gives no rotary angle (the official Mamba3 asserts num_rope_angles > 0)");
        return new Mamba3LMConfig(config, vocab, pad, tie, residualInFp32, fusedAddNorm);
    }

    /**
     * This configuration as the official {@code config.json}: exactly the fields of {@code mamba_ssm}'s
     * {@code MambaConfig}, so {@code MambaLMHeadModel(MambaConfig(**json.load(f)))} accepts it, with every
     * {@code ssm_cfg} field written out.
     *
     * @throws IllegalStateException when the block norm epsilon is not the official 1e-5: {@code MambaConfig} has
     *     no field for it
     */
    public String toJson() {
        Map<String, Object> ssm = new LinkedHashMap<>();
        ssm.put("layer", "Mamba3");
        ssm.put("d_state", config.dState());
        ssm.put("expand", config.expand());
        ssm.put("headdim", config.headdim());
        ssm.put("ngroups", config.ngroups());
        ssm.put("rope_fraction", decimal(config.ropeFraction()));
        ssm.put("A_floor", decimal(config.aFloor()));
        ssm.put("dt_min", decimal(config.dtMin()));
        ssm.put("dt_max", decimal(config.dtMax()));
        ssm.put("dt_init_floor", decimal(config.dtInitFloor()));
        ssm.put("chunk_size", config.chunkSize());
        ssm.put("is_outproj_norm", config.outprojNorm());
        return officialJson(config, config.normEps(), vocabSize, ssm, padVocabMultiple, tieEmbeddings, residualInFp32, fusedAddNorm);
    }

    /**
     * The official {@code MambaConfig} config.json around an {@code ssm_cfg} map, for either architecture.
     *
     * @throws IllegalStateException when the block-norm epsilon is not the official fixed 1e-5
     */
    static String officialJson(ModelConfig config, float normEps, int vocabSize, Map<String, Object> ssm,
            int padVocabMultiple, boolean tieEmbeddings, boolean residualInFp32, boolean fusedAddNorm) {
        if (normEps != OFFICIAL_NORM_EPS)
            throw new IllegalStateException("normEps " + normEps + " cannot be written in the official"
                    + " config.json, whose block norms use a fixed 1e-5");
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("d_model", config.dModel());
        m.put("d_intermediate", 0);
        m.put("n_layer", config.layers());
        m.put("vocab_size", vocabSize);
        m.put("ssm_cfg", ssm);
        m.put("attn_layer_idx", List.of());
        m.put("attn_cfg", Map.of());
        m.put("rms_norm", true);
        m.put("residual_in_fp32", residualInFp32);
        m.put("fused_add_norm", fusedAddNorm);
        m.put("pad_vocab_size_multiple", padVocabMultiple);
        m.put("tie_embeddings", tieEmbeddings);
        return JsonKeys.prettyJson(m);
    }

    static double decimal(float f) {
        return Double.parseDouble(Float.toString(f));
    }
}
