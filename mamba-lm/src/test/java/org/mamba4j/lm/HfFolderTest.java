package org.mamba4j.lm;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.mamba4j.CheckpointException;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.io.SafeTensorsFile;
import org.mamba4j.io.TensorInfo;

/**
 * HuggingFace transformers folders written by {@link MambaLM#savePretrained}: transformers' {@code MambaConfig} keys
 * and {@code MambaForCausalLM} state-dict names and shapes, read back by {@link MambaLM#fromPretrained} bit for bit.
 * (That transformers itself loads them and gives our logits is checked on the device: scripts/hf_finetune.py.)
 */
class HfFolderTest {
    /** d_model 32 (d_inner 64, dt_rank 2), d_state 8, d_conv 4, 2 layers; an unusual norm epsilon. */
    private static final Mamba1Config TINY = Mamba1Config.builder().dModel(32).dState(8).layers(2).normEps(1e-6f).build();
    private static final int ROWS = 41;  // not a multiple of 8: the folder must say how it pads

    @TempDir Path dir;

    private static MambaLM tinyLm(boolean tie, long seed) {
        MambaModel model = MambaModel.builder(TINY).vocabSize(ROWS).tieEmbeddings(tie).seed(seed).build();
        OfficialFolderTest.randomize(model, seed);
        return new MambaLM(model, 37, null);
    }

    /** transformers' MambaForCausalLM state dict for TINY (save_pretrained leaves a tied head out). */
    private static Map<String, long[]> transformersTensors(boolean tie) {
        long D = 32, E = 64, N = 8, R = 2, K = 4;
        Map<String, long[]> t = new LinkedHashMap<>();
        t.put("backbone.embeddings.weight", new long[] {ROWS, D});
        for (int i = 0; i < 2; i++) {
            String p = "backbone.layers." + i + ".";
            t.put(p + "norm.weight", new long[] {D});
            t.put(p + "mixer.A_log", new long[] {E, N});
            t.put(p + "mixer.D", new long[] {E});
            t.put(p + "mixer.conv1d.weight", new long[] {E, 1, K});
            t.put(p + "mixer.conv1d.bias", new long[] {E});
            t.put(p + "mixer.in_proj.weight", new long[] {2 * E, D});
            t.put(p + "mixer.x_proj.weight", new long[] {R + 2 * N, E});
            t.put(p + "mixer.dt_proj.weight", new long[] {E, R});
            t.put(p + "mixer.dt_proj.bias", new long[] {E});
            t.put(p + "mixer.out_proj.weight", new long[] {D, E});
        }
        t.put("backbone.norm_f.weight", new long[] {D});
        if (!tie) t.put("lm_head.weight", new long[] {ROWS, D});
        return t;
    }

    @Test
    void namesShapesAndConfigAreTransformersOwn() throws IOException {
        for (boolean tie : new boolean[] {true, false}) {
            Path folder = dir.resolve("tie-" + tie);
            try (MambaLM lm = tinyLm(tie, 3)) {
                lm.savePretrained(folder);
            }
            Map<String, long[]> stored = new LinkedHashMap<>();
            try (SafeTensorsFile f = SafeTensorsFile.open(folder.resolve("model.safetensors"))) {
                for (TensorInfo t : f.tensors()) stored.put(t.name(), t.shape());
            }
            Map<String, long[]> want = transformersTensors(tie);
            assertEquals(new java.util.TreeSet<>(want.keySet()), new java.util.TreeSet<>(stored.keySet()), "tensor names, tie " + tie);
            for (var e : want.entrySet()) assertArrayEquals(e.getValue(), stored.get(e.getKey()), e.getKey());

            JsonNode c = new ObjectMapper().readTree(folder.resolve("config.json").toFile());
            assertEquals("mamba", c.get("model_type").asText());
            assertEquals("MambaForCausalLM", c.get("architectures").get(0).asText());
            assertEquals(32, c.get("hidden_size").asInt());
            assertEquals(64, c.get("intermediate_size").asInt());
            assertEquals(8, c.get("state_size").asInt());
            assertEquals(2, c.get("num_hidden_layers").asInt());
            assertEquals(4, c.get("conv_kernel").asInt());
            assertEquals(2, c.get("expand").asInt());
            assertEquals(2, c.get("time_step_rank").asInt());
            assertEquals(ROWS, c.get("vocab_size").asInt(), "transformers' vocabulary is the embedding's rows");
            assertEquals(1e-6, c.get("layer_norm_epsilon").asDouble(), 1e-12);
            assertEquals(tie, c.get("tie_word_embeddings").asBoolean());
            assertEquals(false, c.get("use_bias").asBoolean());
            assertEquals(true, c.get("use_conv_bias").asBoolean());
        }
    }

    @Test
    void fromPretrainedReadsItBackBitForBit() {
        for (boolean tie : new boolean[] {true, false}) {
            Path folder = dir.resolve("round-" + tie);
            int[] prompt = {1, 5, 36, 30, 0, 17, 2};
            try (MambaLM lm = tinyLm(tie, 11)) {
                lm.savePretrained(folder);
                try (MambaLM back = MambaLM.fromPretrained(folder, Device.cpu(), DType.F32)) {
                    assertEquals(ROWS, back.vocabSize());
                    assertEquals(tie, back.model().tieEmbeddings());
                    assertEquals(TINY.normEps(), ((Mamba1Config) back.model().config()).normEps());
                    for (String n : lm.model().parameterNames())
                        assertArrayEquals(lm.model().getParameter(n), back.model().getParameter(n), n);
                    assertArrayEquals(lm.logits(prompt), back.logits(prompt), "logits, tie " + tie);
                }
            }
        }
    }

    @Test
    void savingAgainReplacesTheFilesAndLeavesNoTemporaries() throws IOException {
        Path folder = dir.resolve("again");
        try (MambaLM a = tinyLm(true, 1); MambaLM b = tinyLm(true, 2)) {
            a.savePretrained(folder);
            b.savePretrained(folder);
            try (MambaLM back = MambaLM.fromPretrained(folder, Device.cpu(), DType.F32)) {
                String n = "backbone.layers.1.mixer.out_proj.weight";
                assertArrayEquals(b.model().getParameter(n), back.model().getParameter(n));
            }
        }
        try (var files = Files.list(folder)) {
            assertEquals(java.util.List.of("config.json", "model.safetensors"),
                    files.map(p -> p.getFileName().toString()).sorted().toList());
        }
    }

    @Test
    void aMamba3ModelOrAnUnwritablePlaceIsAClearError() throws IOException {
        try (MambaLM m3 = OfficialFolderTest.tinyLm(org.mamba4j.Mamba3Config.builder().dModel(32).layers(2).dState(16)
                .headdim(16).build(), true, 5)) {
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> m3.savePretrained(dir.resolve("m3")));
            assertTrue(e.getMessage().contains("saveOfficial"), e.getMessage());
        }
        Path file = Files.writeString(dir.resolve("a-file"), "x");
        try (MambaLM lm = tinyLm(true, 1)) {
            assertThrows(CheckpointException.class, () -> lm.savePretrained(file));
        }
    }
}
