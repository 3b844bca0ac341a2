package org.mamba4j.lm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.mamba4j.CheckpointException;
import org.mamba4j.InvalidConfigException;
import org.mamba4j.Mamba3Config;
import org.mamba4j.ModelConfig;

/** The official state-spaces {@code MambaConfig} of a Mamba-3 language model: defaults, every option, every refusal. */
class Mamba3LMConfigTest {
    /** The smallest Mamba-3 config.json: everything else takes the official defaults. */
    private static final String MINIMAL = "{\"d_model\": 256, \"n_layer\": 2, \"vocab_size\": 50277, \"ssm_cfg\": {\"layer\": \"Mamba3\"}}";

    /** A config with ssm_cfg set to {@code ssm} (without braces) and the top level extended by {@code extra}. */
    private static String cfg(String ssm, String extra) {
        return "{\"d_model\": 64, \"n_layer\": 2, \"vocab_size\": 100, \"ssm_cfg\": {\"layer\": \"Mamba3\""
                + (ssm.isEmpty() ? "" : ", " + ssm) + "}" + (extra.isEmpty() ? "" : ", " + extra) + "}";
    }

    private static CheckpointException rejects(String json, String... fragments) {
        CheckpointException e = assertThrows(CheckpointException.class, () -> Mamba3LMConfig.parse(json, "cfg.json"), json);
        assertTrue(e.getMessage().startsWith("cfg.json: "), e.getMessage());
        for (String f : fragments) assertTrue(e.getMessage().contains(f), "'" + f + "' not in: " + e.getMessage());
        return e;
    }

    @Test
    void officialDefaults() {
        Mamba3LMConfig c = Mamba3LMConfig.parse(MINIMAL, "cfg.json");
        Mamba3Config m = c.config();
        assertEquals(256, m.dModel());
        assertEquals(2, m.layers());
        assertEquals(128, m.dState());
        assertEquals(2, m.expand());
        assertEquals(64, m.headdim());
        assertEquals(1, m.ngroups());
        assertEquals(0.5f, m.ropeFraction());
        assertEquals(1e-4f, m.aFloor());
        assertEquals(0.001f, m.dtMin());
        assertEquals(0.1f, m.dtMax());
        assertEquals(1e-4f, m.dtInitFloor());
        assertEquals(64, m.chunkSize());
        assertFalse(m.outprojNorm());
        assertEquals(1e-5f, m.normEps());
        assertEquals(Mamba3Config.builder().dModel(256).layers(2).build(), m);  // exactly the builder's defaults
        assertEquals(50277, c.vocabSize());
        assertEquals(8, c.padVocabMultiple());
        assertEquals(50280, c.paddedVocab());
        assertTrue(c.tieEmbeddings());
        assertTrue(c.residualInFp32());
        assertTrue(c.fusedAddNorm());
    }

    @Test
    void everyOptionOverrides() {
        String json = "{\"d_model\": 96, \"d_intermediate\": 0, \"n_layer\": 3, \"vocab_size\": 1000,"
                + " \"ssm_cfg\": {\"layer\": \"Mamba3\", \"d_state\": 32, \"expand\": 4, \"headdim\": 16, \"ngroups\": 2,"
                + " \"rope_fraction\": 1.0, \"A_floor\": 0.0625, \"dt_min\": 0.002, \"dt_max\": 0.2, \"dt_init_floor\": 0.001,"
                + " \"chunk_size\": 32, \"is_outproj_norm\": true, \"is_mimo\": false, \"mimo_rank\": 4,"
                + " \"fuse_pregate_headwise_norm\": true, \"dropout\": 0.0},"
                + " \"attn_layer_idx\": [], \"attn_cfg\": {}, \"rms_norm\": true, \"residual_in_fp32\": false,"
                + " \"fused_add_norm\": false, \"pad_vocab_size_multiple\": 16, \"tie_embeddings\": false, \"norm_epsilon\": 1e-6}";
        Mamba3LMConfig c = Mamba3LMConfig.parse(json, "cfg.json");
        Mamba3Config want = Mamba3Config.builder().dModel(96).layers(3).dState(32).expand(4).headdim(16).ngroups(2)
                .ropeFraction(1.0).aFloor(0.0625).dtMin(0.002).dtMax(0.2).dtInitFloor(0.001).chunkSize(32)
                .outprojNorm(true).normEps(1e-6).build();
        assertEquals(want, c.config());
        assertEquals(24, c.config().nheads());
        assertEquals(16, c.config().ropeAngles());
        assertEquals(1000, c.vocabSize());
        assertEquals(16, c.padVocabMultiple());
        assertEquals(1008, c.paddedVocab());
        assertFalse(c.tieEmbeddings());
        assertFalse(c.residualInFp32());
        assertFalse(c.fusedAddNorm());
        // unknown top-level keys are ignored (as in the Mamba-1 reader); nulls read as absent
        assertEquals(8, Mamba3LMConfig.parse(cfg("\"d_state\": null", "\"torch_dtype\": \"bfloat16\", \"pad_vocab_size_multiple\": null"),
                "c").padVocabMultiple());
    }

    @Test
    void rejectsWhatIsNotImplemented() {
        rejects(cfg("", "\"attn_layer_idx\": [1]"), "'attn_layer_idx'", "attention");
        rejects(cfg("", "\"attn_layer_idx\": 3"), "'attn_layer_idx'");
        rejects(cfg("", "\"d_intermediate\": 256"), "'d_intermediate'", "MLP");
        rejects(cfg("", "\"rms_norm\": false"), "'rms_norm'", "LayerNorm");
        rejects(cfg("\"is_mimo\": true", ""), "'ssm_cfg.is_mimo'", "MIMO");
        rejects(cfg("\"use_fancy_thing\": 1", ""), "'ssm_cfg.use_fancy_thing'", "not a Mamba3 option");
        rejects(cfg("", "\"attn_cfg\": 5"), "'attn_cfg' must be an object");
        // not Mamba-3 at all
        rejects("{\"d_model\": 64, \"n_layer\": 2, \"vocab_size\": 10, \"ssm_cfg\": {\"layer\": \"Mamba1\"}}", "not a Mamba-3 config");
        rejects("{\"d_model\": 64, \"n_layer\": 2, \"vocab_size\": 10}", "not a Mamba-3 config");
    }

    @Test
    void missingRequiredKeys() {
        rejects("{\"n_layer\": 2, \"vocab_size\": 10, \"ssm_cfg\": {\"layer\": \"Mamba3\"}}", "missing required key 'd_model'");
        rejects("{\"d_model\": 64, \"vocab_size\": 10, \"ssm_cfg\": {\"layer\": \"Mamba3\"}}", "missing required key 'n_layer'");
        rejects("{\"d_model\": 64, \"n_layer\": 2, \"ssm_cfg\": {\"layer\": \"Mamba3\"}}", "missing required key 'vocab_size'");
    }

    @Test
    void wrongTypes() {
        rejects(cfg("\"d_state\": \"16\"", ""), "'ssm_cfg.d_state' must be an integer");
        rejects(cfg("\"headdim\": 16.5", ""), "'ssm_cfg.headdim' must be an integer");
        rejects(cfg("\"is_outproj_norm\": \"yes\"", ""), "'ssm_cfg.is_outproj_norm' must be true or false");
        rejects(cfg("\"is_mimo\": 0", ""), "'ssm_cfg.is_mimo' must be true or false");
        rejects(cfg("\"rope_fraction\": \"half\"", ""), "'ssm_cfg.rope_fraction' must be a number");
        rejects(cfg("\"A_floor\": [1]", ""), "'ssm_cfg.A_floor' must be a number");
        rejects(cfg("\"dropout\": \"x\"", ""), "'ssm_cfg.dropout' must be a number");
        rejects(cfg("\"mimo_rank\": -1", ""), "'ssm_cfg.mimo_rank' must be positive");
        rejects(cfg("", "\"tie_embeddings\": 1"), "'tie_embeddings' must be true or false");
        rejects(cfg("", "\"residual_in_fp32\": \"true\""), "'residual_in_fp32'");
        rejects(cfg("", "\"fused_add_norm\": null, \"norm_epsilon\": \"tiny\""), "'norm_epsilon' must be a number");
        rejects("{\"d_model\": 64, \"n_layer\": 2, \"vocab_size\": 10, \"ssm_cfg\": [\"Mamba3\"]}", "not a Mamba-3 config");
        rejects("{\"d_model\": \"64\", \"n_layer\": 2, \"vocab_size\": 10, \"ssm_cfg\": {\"layer\": \"Mamba3\"}}",
                "'d_model' must be an integer");
        // an integral float is an integer
        assertEquals(32, Mamba3LMConfig.parse(cfg("\"d_state\": 32.0", ""), "c").config().dState());
    }

    @Test
    void hostileValues() {
        rejects(cfg("", "\"d_model\": -64").replace("\"d_model\": 64, ", ""), "'d_model' must be positive");
        rejects(cfg("", "").replace("\"n_layer\": 2", "\"n_layer\": 2147483648"), "'n_layer' must be in [1, 1024]");
        rejects(cfg("", "").replace("\"n_layer\": 2", "\"n_layer\": 99999999999999999999999"), "'n_layer'");
        rejects(cfg("", "").replace("\"vocab_size\": 100", "\"vocab_size\": 0"), "'vocab_size' must be positive");
        rejects(cfg("", "").replace("\"vocab_size\": 100", "\"vocab_size\": 10000001"), "'vocab_size' must be in [1, 10000000]");
        rejects(cfg("", "\"pad_vocab_size_multiple\": 256").replace("\"vocab_size\": 100", "\"vocab_size\": 9999999"),
                "'vocab_size' 9999999 padded to a multiple of 256 exceeds 10000000");
        rejects(cfg("", "\"pad_vocab_size_multiple\": 0"), "'pad_vocab_size_multiple' must be positive");
        rejects(cfg("", "\"pad_vocab_size_multiple\": 1000000"), "'pad_vocab_size_multiple' must be in [1, 65536]");
        rejects(cfg("", "\"d_intermediate\": -1"), "'d_intermediate' must be in [0,");
        rejects(cfg("\"d_state\": -16", ""), "'ssm_cfg.d_state' must be positive");
        rejects(cfg("\"d_state\": 100000", ""), "'ssm_cfg.d_state' must be in [1, 256]");
        rejects(cfg("\"expand\": 0", ""), "'ssm_cfg.expand' must be positive");
        rejects(cfg("\"headdim\": 0", ""), "'ssm_cfg.headdim' must be positive");
        rejects(cfg("\"headdim\": 48", ""), "'ssm_cfg.headdim' 48 must divide expand × d_model = 128");
        rejects(cfg("\"headdim\": 16, \"ngroups\": 3", ""), "'ssm_cfg.ngroups' 3 must divide");
        rejects(cfg("\"ngroups\": 0", ""), "'ssm_cfg.ngroups' must be positive");
        rejects(cfg("\"headdim\": 128, \"d_state\": 256", ""), "'ssm_cfg.headdim' × 'd_state'");
        rejects(cfg("\"chunk_size\": 0", ""), "'ssm_cfg.chunk_size' must be positive");
        rejects(cfg("\"chunk_size\": 100000", ""), "'ssm_cfg.chunk_size' must be in [1, 256]");
        rejects(cfg("\"rope_fraction\": 0.7", ""), "'ssm_cfg.rope_fraction' must be 0.5 or 1.0");
        rejects(cfg("\"rope_fraction\": -1", ""), "'ssm_cfg.rope_fraction' must be 0.5 or 1.0");
        rejects(cfg("\"A_floor\": 0", ""), "'ssm_cfg.A_floor' must be in (0, 1)");
        rejects(cfg("\"A_floor\": 2", ""), "'ssm_cfg.A_floor' must be in (0, 1)");
        rejects(cfg("\"A_floor\": 1e400", ""));  // out of double range: rejected, whichever way
        rejects(cfg("\"dt_min\": -0.001", ""), "'ssm_cfg.dt_min' must be in (0, 100)");
        rejects(cfg("\"dt_max\": 1000", ""), "'ssm_cfg.dt_max' must be in (0, 100)");
        rejects(cfg("\"dt_min\": 0.5, \"dt_max\": 0.1", ""), "'ssm_cfg.dt_min'", "dt_max");
        rejects(cfg("\"dt_init_floor\": 0", ""), "'ssm_cfg.dt_init_floor' must be in (0, 1)");
        rejects(cfg("\"d_state\": 2", ""), "'ssm_cfg.d_state' 2", "rotary angle");
        rejects(cfg("", "\"norm_epsilon\": 0"), "'norm_epsilon' must be in (0, 1)");
        rejects(cfg("\"expand\": 16", "").replace("\"d_model\": 64", "\"d_model\": 65536"), "'ssm_cfg.expand'");
        // one angle with d_state 2 at rope_fraction 1 is enough
        assertEquals(1, Mamba3LMConfig.parse(cfg("\"d_state\": 2, \"rope_fraction\": 1", ""), "c").config().ropeAngles());
    }

    @Test
    void unparseableJson() {
        rejects("{\"d_model\": 64,", "not valid JSON");
        rejects("", "empty");
        rejects("[1, 2]", "expected a JSON object");
        rejects(cfg("\"d_state\": 16, \"d_state\": 32", ""), "d_state");  // a repeated key
        rejects("{\"d_model\": NaN}", "not valid JSON");
    }

    /** The integer limits are libmamba's: each maximum is quoted from ModelConfig.limitMax. */
    @Test
    void limitsAreTheNativeOnes() {
        long dState = ModelConfig.limitMax("dState"), headdim = ModelConfig.limitMax("headdim");
        rejects(cfg("\"d_state\": " + (dState + 1), ""), "must be in [1, " + dState + "]");
        rejects(cfg("\"headdim\": " + (headdim + 1), ""), "must be in [1, " + headdim + "]");
        assertEquals(dState, Mamba3LMConfig.parse(cfg("\"d_state\": " + dState + ", \"headdim\": 16", ""), "c").config().dState());
    }

    /** toJson is the official MambaConfig: exactly its fields, every ssm_cfg option, and it reads back equal. */
    @Test
    void toJsonIsTheOfficialMambaConfig() throws IOException {
        Mamba3LMConfig c = new Mamba3LMConfig(Mamba3Config.builder().dModel(96).layers(3).dState(32).headdim(16).ngroups(2)
                .ropeFraction(1).aFloor(0.0625).dtMin(0.002).dtMax(0.2).dtInitFloor(0.001).chunkSize(32).outprojNorm(true).build(),
                1000, 16, false, true, false);
        String json = c.toJson();
        JsonNode root = new ObjectMapper().readTree(json);
        assertEquals(List.of("d_model", "d_intermediate", "n_layer", "vocab_size", "ssm_cfg", "attn_layer_idx", "attn_cfg", "rms_norm",
                "residual_in_fp32", "fused_add_norm", "pad_vocab_size_multiple", "tie_embeddings"), names(root));
        assertEquals(List.of("layer", "d_state", "expand", "headdim", "ngroups", "rope_fraction", "A_floor", "dt_min", "dt_max",
                "dt_init_floor", "chunk_size", "is_outproj_norm"), names(root.get("ssm_cfg")));
        assertEquals("Mamba3", root.get("ssm_cfg").get("layer").textValue());
        assertEquals("0.0625", root.get("ssm_cfg").get("A_floor").toString());  // shortest decimals, not float noise
        assertEquals("0.002", root.get("ssm_cfg").get("dt_min").toString());
        assertEquals(c, Mamba3LMConfig.parse(json, "c"));
        Mamba3LMConfig defaults = Mamba3LMConfig.parse(MINIMAL, "c");
        assertEquals(defaults, Mamba3LMConfig.parse(defaults.toJson(), "c"));
        assertTrue(defaults.toJson().contains("\"A_floor\" : 1.0E-4"), defaults.toJson());
        // the official format has no norm epsilon: a model with another one cannot be written
        Mamba3LMConfig eps = new Mamba3LMConfig(Mamba3Config.builder().dModel(64).headdim(16).dState(16).normEps(1e-6).build(),
                10, 8, true, true, true);
        assertTrue(assertThrows(IllegalStateException.class, eps::toJson).getMessage().contains("normEps"));
    }

    @Test
    void recordInvariants() {
        Mamba3Config m = Mamba3Config.builder().dModel(64).headdim(16).dState(16).build();
        assertThrows(InvalidConfigException.class, () -> new Mamba3LMConfig(m, 0, 8, true, true, true));
        assertThrows(InvalidConfigException.class, () -> new Mamba3LMConfig(m, 10, 0, true, true, true));
        assertThrows(InvalidConfigException.class, () -> new Mamba3LMConfig(m, 9_999_999, 256, true, true, true));
        assertThrows(InvalidConfigException.class,
                () -> new Mamba3LMConfig(Mamba3Config.builder().dModel(64).headdim(16).dState(2).build(), 10, 8, true, true, true));
        assertThrows(NullPointerException.class, () -> new Mamba3LMConfig(null, 10, 8, true, true, true));
    }

    @Test
    void detectionAndReading(@TempDir Path dir) throws IOException {
        Path m3 = Files.createDirectories(dir.resolve("m3"));
        Files.writeString(m3.resolve("config.json"), MINIMAL);
        assertTrue(Mamba3LMConfig.isMamba3(m3));
        assertTrue(Mamba3LMConfig.isMamba3(m3.resolve("config.json")));
        assertEquals(256, Mamba3LMConfig.read(m3).config().dModel());
        Path m1 = Files.createDirectories(dir.resolve("m1"));
        Files.writeString(m1.resolve("config.json"), "{\"d_model\": 64, \"n_layer\": 2, \"vocab_size\": 10, \"ssm_cfg\": {}}");
        assertFalse(Mamba3LMConfig.isMamba3(m1));
        assertFalse(Mamba3LMConfig.isMamba3(dir.resolve("absent")));
        Files.writeString(dir.resolve("broken.json"), "{{{");
        assertFalse(Mamba3LMConfig.isMamba3(dir.resolve("broken.json")));
        assertTrue(assertThrows(CheckpointException.class, () -> Mamba3LMConfig.read(dir.resolve("absent"))).getMessage()
                .contains("not found"));
        // the Mamba-1 reader points at the Mamba-3 one
        CheckpointException e = assertThrows(CheckpointException.class, () -> HfMambaConfig.read(m3));
        assertTrue(e.getMessage().contains("Mamba3LMConfig"), e.getMessage());
        assertTrue(e.getMessage().contains("'ssm_cfg.layer'"), e.getMessage());
    }

    private static List<String> names(JsonNode object) {
        List<String> n = new ArrayList<>();
        for (Iterator<String> it = object.fieldNames(); it.hasNext(); ) n.add(it.next());
        return n;
    }
}
