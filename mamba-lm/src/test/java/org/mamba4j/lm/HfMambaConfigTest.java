package org.mamba4j.lm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.mamba4j.CheckpointException;
import org.mamba4j.InvalidConfigException;
import org.mamba4j.ModelConfig;

class HfMambaConfigTest {

    /** The keys of state-spaces/mamba-130m-hf's config.json (transformers layout). */
    private static final String MAMBA_130M_HF = """
            {
              "architectures": ["MambaForCausalLM"],
              "bos_token_id": 0,
              "conv_kernel": 4,
              "d_inner": 1536,
              "d_model": 768,
              "eos_token_id": 0,
              "expand": 2,
              "fused_add_norm": true,
              "hidden_act": "silu",
              "hidden_size": 768,
              "initializer_range": 0.1,
              "intermediate_size": 1536,
              "layer_norm_epsilon": 1e-05,
              "model_type": "mamba",
              "n_layer": 24,
              "num_hidden_layers": 24,
              "pad_token_id": 0,
              "pad_vocab_size_multiple": 8,
              "rescale_prenorm_residual": false,
              "residual_in_fp32": true,
              "rms_norm": true,
              "state_size": 16,
              "time_step_floor": 0.0001,
              "time_step_init_scheme": "random",
              "time_step_max": 0.1,
              "time_step_min": 0.001,
              "time_step_rank": 48,
              "time_step_scale": 1.0,
              "torch_dtype": "float32",
              "transformers_version": "4.39.0.dev0",
              "use_bias": false,
              "use_cache": true,
              "use_conv_bias": true,
              "vocab_size": 50280
            }
            """;

    /** state-spaces/mamba-130m's config.json (mamba_ssm layout). */
    private static final String MAMBA_130M_ORIGINAL = """
            {
              "d_model": 768,
              "n_layer": 24,
              "vocab_size": 50277,
              "ssm_cfg": {},
              "rms_norm": true,
              "residual_in_fp32": true,
              "fused_add_norm": true,
              "pad_vocab_size_multiple": 8
            }
            """;

    private static final String MINIMAL_HF =
            "{\"model_type\": \"mamba\", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"vocab_size\": 256";

    @Test
    void transformersLayout() {
        HfMambaConfig c = HfMambaConfig.parse(MAMBA_130M_HF, "config.json");
        assertEquals(768, c.dModel());
        assertEquals(24, c.nLayers());
        assertEquals(16, c.dState());
        assertEquals(4, c.dConv());
        assertEquals(2, c.expand());
        assertEquals(1536, c.dInner());
        assertEquals(48, c.dtRank());
        assertEquals(50280, c.vocabSize());
        assertEquals(8, c.padVocabMultiple());
        assertEquals(50280, c.paddedVocab());
        assertEquals(1e-5, c.normEps());
        assertTrue(c.tieEmbeddings());
        assertTrue(c.useConvBias());
    }

    @Test
    void stateSpacesLayout() {
        HfMambaConfig c = HfMambaConfig.parse(MAMBA_130M_ORIGINAL, "config.json");
        assertEquals(768, c.dModel());
        assertEquals(24, c.nLayers());
        assertEquals(16, c.dState());
        assertEquals(4, c.dConv());
        assertEquals(2, c.expand());
        assertEquals(1536, c.dInner());
        assertEquals(48, c.dtRank());
        assertEquals(50277, c.vocabSize());
        assertEquals(8, c.padVocabMultiple());
        assertEquals(50280, c.paddedVocab());
        assertEquals(1e-5, c.normEps());
        assertTrue(c.tieEmbeddings());
        assertTrue(c.useConvBias());
    }

    @Test
    void stateSpacesSsmCfgAndDefaults() {
        HfMambaConfig c = HfMambaConfig.parse(
                "{\"d_model\": 100, \"n_layer\": 3, \"vocab_size\": 1000, \"pad_vocab_size_multiple\": 16,"
                        + " \"tie_embeddings\": false, \"norm_epsilon\": 1e-6,"
                        + " \"ssm_cfg\": {\"d_state\": 8, \"d_conv\": 3, \"expand\": 3, \"dt_rank\": \"auto\","
                        + " \"conv_bias\": false, \"layer\": \"Mamba1\"}}",
                "x.json");
        assertEquals(8, c.dState());
        assertEquals(3, c.dConv());
        assertEquals(3, c.expand());
        assertEquals(300, c.dInner());
        assertEquals(7, c.dtRank()); // ceil(100 / 16)
        assertEquals(1008, c.paddedVocab());
        assertFalse(c.tieEmbeddings());
        assertFalse(c.useConvBias());
        assertEquals(1e-6, c.normEps());
        assertEquals(5, HfMambaConfig.parse(
                "{\"d_model\": 64, \"n_layer\": 1, \"vocab_size\": 10, \"ssm_cfg\": {\"dt_rank\": 5}}", "x")
                .dtRank());
    }

    @Test
    void transformersAutoDtRank() {
        String auto = "{\"model_type\": \"mamba\", \"hidden_size\": 100, \"num_hidden_layers\": 2,"
                + " \"vocab_size\": 256, \"time_step_rank\": \"auto\"}";
        HfMambaConfig c = HfMambaConfig.parse(auto, "c");
        assertEquals(100, c.dModel());
        assertEquals(7, c.dtRank()); // ceil(100 / 16)
        assertEquals(48, HfMambaConfig.parse(MAMBA_130M_HF.replace("\"time_step_rank\": 48", "\"time_step_rank\": \"auto\""),
                "c").dtRank());
    }

    @Test
    void transformersDefaults() {
        HfMambaConfig c = HfMambaConfig.parse(MINIMAL_HF + "}", "c");
        assertEquals(16, c.dState());
        assertEquals(4, c.dConv());
        assertEquals(2, c.expand());
        assertEquals(128, c.dInner());
        assertEquals(4, c.dtRank());
        assertEquals(1e-5, c.normEps());
        assertTrue(c.tieEmbeddings());
        assertTrue(c.useConvBias());
        assertEquals(256, c.paddedVocab());
        HfMambaConfig eps = HfMambaConfig.parse(MINIMAL_HF + ", \"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": false,"
                + " \"use_conv_bias\": false, \"expand\": 1, \"intermediate_size\": 64}", "c");
        assertEquals(1e-6, eps.normEps());
        assertFalse(eps.tieEmbeddings());
        assertFalse(eps.useConvBias());
        assertEquals(64, eps.dInner());
        assertEquals(3, HfMambaConfig.parse(MINIMAL_HF + ", \"intermediate_size\": 192}", "c").expand());
    }

    @Test
    void transformersVocabIsNotPadded() {
        HfMambaConfig c = HfMambaConfig.parse(
                "{\"model_type\": \"mamba\", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"vocab_size\": 50277}", "c");
        assertEquals(50277, c.vocabSize());
        assertEquals(50277, c.paddedVocab());
        assertEquals(1, c.padVocabMultiple());
    }

    @Test
    void readsAFileOrAFolder(@TempDir Path dir) throws IOException {
        Path file = dir.resolve("config.json");
        Files.writeString(file, MAMBA_130M_HF);
        assertEquals(768, HfMambaConfig.read(file).dModel());
        assertEquals(768, HfMambaConfig.read(dir).dModel());
        Files.writeString(file, "{\"model_type\": \"mamba\", \"hidden_size\": 0}");
        CheckpointException e = assertThrows(CheckpointException.class, () -> HfMambaConfig.read(file));
        assertTrue(e.getMessage().contains(file.toString()), e.getMessage());
        assertTrue(e.getMessage().contains("hidden_size"), e.getMessage());
    }

    @Test
    void missingFile(@TempDir Path dir) {
        Path missing = dir.resolve("nope.json");
        CheckpointException e = assertThrows(CheckpointException.class, () -> HfMambaConfig.read(missing));
        assertTrue(e.getMessage().contains(missing.toString()), e.getMessage());
        CheckpointException folder = assertThrows(CheckpointException.class, () -> HfMambaConfig.read(dir));
        assertTrue(folder.getMessage().contains("config.json"), folder.getMessage());
    }

    @Test
    void unparseableJson() {
        rejects("{\"model_type\": \"mamba\", \"hidden_size\": 768,", "not valid JSON");
        rejects("", "empty");
        rejects("[1, 2]", "JSON object");
        rejects(MINIMAL_HF + ", \"vocab_size\": 300}", "vocab_size"); // duplicate key
    }

    @Test
    void missingRequiredKeys() {
        rejects("{\"model_type\": \"mamba\", \"num_hidden_layers\": 2, \"vocab_size\": 10}", "'hidden_size'");
        rejects("{\"model_type\": \"mamba\", \"hidden_size\": 64, \"vocab_size\": 10}", "'num_hidden_layers'");
        rejects("{\"model_type\": \"mamba\", \"hidden_size\": 64, \"num_hidden_layers\": 2}", "'vocab_size'");
        rejects("{\"n_layer\": 2, \"vocab_size\": 10}", "'d_model'");
        rejects("{\"d_model\": 64, \"vocab_size\": 10}", "'n_layer'");
        rejects("{\"d_model\": 64, \"n_layer\": 2}", "'vocab_size'");
    }

    @Test
    void wrongTypes() {
        rejects("{\"model_type\": \"mamba\", \"hidden_size\": \"768\", \"num_hidden_layers\": 2, \"vocab_size\": 10}",
                "'hidden_size' must be an integer");
        rejects("{\"model_type\": \"mamba\", \"hidden_size\": 76.5, \"num_hidden_layers\": 2, \"vocab_size\": 10}",
                "'hidden_size' must be an integer");
        rejects(MINIMAL_HF + ", \"use_bias\": \"no\"}", "'use_bias' must be true or false");
        rejects(MINIMAL_HF + ", \"tie_word_embeddings\": 1}", "'tie_word_embeddings'");
        rejects(MINIMAL_HF + ", \"layer_norm_epsilon\": \"small\"}", "'layer_norm_epsilon' must be a number");
        rejects(MINIMAL_HF + ", \"time_step_rank\": \"big\"}", "'time_step_rank' must be an integer or \"auto\"");
        rejects(MINIMAL_HF + ", \"hidden_act\": 3}", "'hidden_act' must be a string");
        rejects("{\"model_type\": 7, \"hidden_size\": 64}", "'model_type' must be a string");
        rejects("{\"d_model\": 64, \"n_layer\": 2, \"vocab_size\": 10, \"ssm_cfg\": [1]}", "'ssm_cfg' must be an object");
        rejects("{\"d_model\": 64, \"n_layer\": 2, \"vocab_size\": 10, \"ssm_cfg\": {\"d_state\": true}}",
                "'ssm_cfg.d_state' must be an integer");
        // an integral float is accepted
        assertEquals(2, HfMambaConfig.parse(MINIMAL_HF + ", \"expand\": 2.0}", "c").expand());
    }

    @Test
    void nonPositiveSizes() {
        rejects("{\"model_type\": \"mamba\", \"hidden_size\": 0, \"num_hidden_layers\": 2, \"vocab_size\": 10}",
                "'hidden_size' must be positive");
        rejects("{\"model_type\": \"mamba\", \"hidden_size\": 64, \"num_hidden_layers\": -1, \"vocab_size\": 10}",
                "'num_hidden_layers' must be positive");
        rejects(MINIMAL_HF + ", \"state_size\": 0}", "'state_size' must be positive");
        rejects(MINIMAL_HF + ", \"conv_kernel\": -4}", "'conv_kernel'");
        rejects(MINIMAL_HF + ", \"time_step_rank\": 0}", "'time_step_rank'");
        rejects(MINIMAL_HF + ", \"pad_vocab_size_multiple\": 0}", "'pad_vocab_size_multiple'");
        rejects(MINIMAL_HF + ", \"layer_norm_epsilon\": 0}", "'layer_norm_epsilon' must be in (0, 1)");
        rejects("{\"d_model\": 64, \"n_layer\": 2, \"vocab_size\": 0}", "'vocab_size' must be positive");
    }

    /** The limits are libmamba's (ModelConfig.limitMax), not a Java copy: each maximum passes, one more fails. */
    @Test
    void sizeLimitsAreTheNativeOnes() {
        String[][] keys = {{"hidden_size", "dModel"}, {"num_hidden_layers", "layers"}, {"state_size", "dState"},
            {"conv_kernel", "dConv"}, {"expand", "expand"}, {"vocab_size", "vocabSize"}};
        for (String[] k : keys) {
            long max = ModelConfig.limitMax(k[1]);
            String base = "{\"model_type\": \"mamba\", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"vocab_size\": 256, ";
            String ok = base.replace("\"" + k[0] + "\": 64, ", "").replace("\"" + k[0] + "\": 2, ", "")
                    .replace("\"" + k[0] + "\": 256, ", "") + "\"" + k[0] + "\": " + max + "}";
            String bad = ok.replace(": " + max + "}", ": " + (max + 1) + "}");
            HfMambaConfig.parse(ok, "cfg.json");
            long min = Math.max(1, ModelConfig.limitMin(k[1]));  // a language model has at least one token
            rejects(bad, "'" + k[0] + "' must be in [" + min + ", " + max + "]");
        }
        assertThrows(InvalidConfigException.class, () -> new HfMambaConfig(64, 2, (int) ModelConfig.limitMax("dState") + 1, 4, 2,
                128, 4, 256, 8, 1e-5, true, true));
    }

    @Test
    void absurdSizes() {
        rejects("{\"model_type\": \"mamba\", \"hidden_size\": 65537, \"num_hidden_layers\": 2, \"vocab_size\": 10}",
                "'hidden_size' must be in [1, 65536]");
        rejects("{\"model_type\": \"mamba\", \"hidden_size\": 64, \"num_hidden_layers\": 1025, \"vocab_size\": 10}",
                "'num_hidden_layers' must be in [1, 1024]");
        rejects("{\"model_type\": \"mamba\", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"vocab_size\": 10000001}",
                "'vocab_size' must be in [1, 10000000]");
        rejects(MINIMAL_HF + ", \"state_size\": 257}", "'state_size' must be in [1, 256]");
        rejects(MINIMAL_HF + ", \"conv_kernel\": 9}", "'conv_kernel' must be in [1, 8]");
        rejects(MINIMAL_HF + ", \"expand\": 1000}", "'expand'");
        rejects("{\"model_type\": \"mamba\", \"hidden_size\": 99999999999999999999, \"num_hidden_layers\": 2,"
                + " \"vocab_size\": 10}", "'hidden_size'");
        rejects("{\"d_model\": 70000, \"n_layer\": 2, \"vocab_size\": 10}", "'d_model'");
        rejects("{\"d_model\": 64, \"n_layer\": 2000, \"vocab_size\": 10}", "'n_layer'");
        rejects("{\"d_model\": 64, \"n_layer\": 2, \"vocab_size\": 10, \"ssm_cfg\": {\"d_state\": 512}}",
                "'ssm_cfg.d_state' must be in [1, 256]");
        rejects("{\"d_model\": 64, \"n_layer\": 2, \"vocab_size\": 10, \"ssm_cfg\": {\"d_conv\": 16}}",
                "'ssm_cfg.d_conv' must be in [1, 8]");
    }

    @Test
    void otherModelTypes() {
        CheckpointException falcon = rejects(
                "{\"model_type\": \"falcon_mamba\", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"vocab_size\": 10}",
                "\"falcon_mamba\" is not supported");
        assertTrue(falcon.getMessage().contains("norms"), falcon.getMessage());
        rejects("{\"model_type\": \"mamba2\", \"hidden_size\": 64}", "\"mamba2\" is not supported");
        rejects("{\"model_type\": \"llama\", \"hidden_size\": 64}", "'model_type' must be \"mamba\", got \"llama\"");
        rejects("{\"d_model\": 64, \"n_layer\": 2, \"vocab_size\": 10, \"ssm_cfg\": {\"layer\": \"Mamba2\"}}",
                "'ssm_cfg.layer' must be \"Mamba1\"");
        rejects("{\"d_model\": 64, \"n_layer\": 2, \"vocab_size\": 10, \"attn_layer_idx\": [1]}", "'attn_layer_idx'");
        rejects("{\"d_model\": 64, \"n_layer\": 2, \"vocab_size\": 10, \"d_intermediate\": 128}", "'d_intermediate' is 128");
        rejects("{\"d_model\": 64, \"n_layer\": 2, \"vocab_size\": 10, \"ssm_cfg\": {\"layer\": \"Mamba3\"}}",
                "'ssm_cfg.layer' is \"Mamba3\": this is a Mamba-3 model, read its config.json with Mamba3LMConfig");
        assertEquals(64, HfMambaConfig.parse("{\"d_model\": 64, \"n_layer\": 2, \"vocab_size\": 10, \"d_intermediate\": 0}", "c")
                .dModel());
    }

    @Test
    void unsupportedFeatures() {
        rejects(MINIMAL_HF + ", \"use_bias\": true}", "in_proj/out_proj biases are not supported");
        rejects("{\"d_model\": 64, \"n_layer\": 2, \"vocab_size\": 10, \"ssm_cfg\": {\"bias\": true}}",
                "in_proj/out_proj biases are not supported");
        rejects("{\"d_model\": 64, \"n_layer\": 2, \"vocab_size\": 10, \"rms_norm\": false}", "'rms_norm' is false");
        rejects(MINIMAL_HF + ", \"hidden_act\": \"gelu\"}", "'hidden_act' must be \"silu\", got \"gelu\"");
        assertEquals(64, HfMambaConfig.parse(MINIMAL_HF + ", \"hidden_act\": \"silu\"}", "c").dModel());
    }

    @Test
    void intermediateSizeMustAgreeWithExpand() {
        rejects(MINIMAL_HF + ", \"expand\": 2, \"intermediate_size\": 129}",
                "'intermediate_size' 129 disagrees with expand * hidden_size = 2 * 64 = 128");
        rejects(MINIMAL_HF + ", \"intermediate_size\": 100}", "'intermediate_size' 100 is not an integer multiple");
    }

    @Test
    void messagesNameTheSource() {
        CheckpointException e = assertThrows(
                CheckpointException.class, () -> HfMambaConfig.parse(MINIMAL_HF + ", \"state_size\": 0}", "/m/config.json"));
        assertTrue(e.getMessage().startsWith("/m/config.json: "), e.getMessage());
    }

    @Test
    void recordValidatesDirectConstruction() {
        new HfMambaConfig(768, 24, 16, 4, 2, 1536, 48, 50277, 8, 1e-5, true, true);
        assertThrows(InvalidConfigException.class,
                () -> new HfMambaConfig(768, 24, 16, 4, 2, 1535, 48, 50277, 8, 1e-5, true, true));
        assertThrows(InvalidConfigException.class,
                () -> new HfMambaConfig(0, 24, 16, 4, 2, 0, 48, 50277, 8, 1e-5, true, true));
        assertThrows(InvalidConfigException.class,
                () -> new HfMambaConfig(768, 24, 16, 4, 2, 1536, 48, 50277, 8, 0.0, true, true));
    }

    private static CheckpointException rejects(String json, String expectedInMessage) {
        CheckpointException e = assertThrows(CheckpointException.class, () -> HfMambaConfig.parse(json, "cfg.json"),
                () -> "accepted: " + json);
        assertTrue(e.getMessage().startsWith("cfg.json: "), e.getMessage());
        assertTrue(e.getMessage().contains(expectedInMessage),
                () -> "expected \"" + expectedInMessage + "\" in: " + e.getMessage());
        return e;
    }
}
