package org.mamba4j.lm;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.mamba4j.CheckpointException;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.MambaState;
import org.mamba4j.fuzz.FuzzChecks;
import org.mamba4j.io.SafeTensors;

/**
 * HuggingFace-format checkpoints built inside the test (config.json + safetensors with HF key names and
 * PyTorch [out, in] layouts, a tiny tokenizer.json), loaded through MambaLM and checked against an
 * independent computation: the same backbone fed the embedding rows as float inputs, then E·h in double.
 */
class MambaLMTest {
    private static final int D = 32, LAYERS = 2, VOCAB = 22, PADDED = 24;
    @TempDir Path dir;

    @BeforeAll
    static void djlCache() {
        if (System.getProperty("ENGINE_CACHE_DIR") == null)
            System.setProperty("ENGINE_CACHE_DIR", Path.of("target", "djl-cache").toAbsolutePath().toString());
    }

    /** Random HF tensors for a tiny model: name → (shape, values). */
    private static Map<String, SafeTensors.Entry> hfTensors(boolean tie, int embeddingRows, long seed) {
        Map<String, SafeTensors.Entry> t = new LinkedHashMap<>();
        try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(D).layers(LAYERS).dState(8).build())
                .vocabSize(PADDED).tieEmbeddings(tie).seed(seed).build()) {
            Random rng = new Random(seed);
            for (String name : m.parameterNames()) {
                long[] shape = m.parameterShape(name);
                float[] v = m.getParameter(name);
                if (name.endsWith("norm.weight") || name.endsWith("norm_f.weight") || name.endsWith(".D"))
                    for (int i = 0; i < v.length; i++) v[i] = (float) (0.5 + rng.nextDouble());
                if (name.equals("backbone.embeddings.weight") || name.equals("lm_head.weight")) {
                    for (int i = 0; i < v.length; i++) v[i] = (float) (0.05 * rng.nextGaussian());  // small: unpeaked logits
                    shape = new long[] {embeddingRows, D};
                    v = java.util.Arrays.copyOf(v, embeddingRows * D);
                }
                t.put(name, new SafeTensors.Entry(name, shape, v));
            }
        }
        return t;
    }

    private static String config(boolean tie, int vocab) {
        return "{\"model_type\": \"mamba\", \"hidden_size\": " + D + ", \"state_size\": 8, \"num_hidden_layers\": " + LAYERS
                + ", \"expand\": 2, \"intermediate_size\": " + 2 * D + ", \"conv_kernel\": 4, \"time_step_rank\": \"auto\","
                + " \"layer_norm_epsilon\": 1e-5, \"use_bias\": false, \"use_conv_bias\": true, \"vocab_size\": " + vocab
                + ", \"pad_vocab_size_multiple\": 8, \"tie_word_embeddings\": " + tie + ", \"hidden_act\": \"silu\"}";
    }

    private Path folder(String name, boolean tie, Map<String, SafeTensors.Entry> tensors) throws IOException {
        Path f = dir.resolve(name);
        Files.createDirectories(f);
        Files.writeString(f.resolve("config.json"), config(tie, PADDED));
        Files.writeString(f.resolve("tokenizer.json"), TokenizerTest.GPT_NEOX_LIKE);
        SafeTensors.write(f.resolve("model.safetensors"), Map.of("format", "pt"), new ArrayList<>(tensors.values()));
        return f;
    }

    /** Logits the slow way: backbone on embedding rows (float input), final-normed h, then head·h in double. */
    private static double[] expectedLogits(Map<String, SafeTensors.Entry> t, boolean tie, int[] prompt) {
        float[] emb = t.get("backbone.embeddings.weight").data();
        float[] head = tie ? emb : t.get("lm_head.weight").data();
        int rows = emb.length / D;
        try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(D).layers(LAYERS).dState(8).build()).build()) {
            for (String name : m.parameterNames()) m.setParameter(name, t.get(name).data());
            float[] x = new float[prompt.length * D];
            for (int i = 0; i < prompt.length; i++) System.arraycopy(emb, prompt[i] * D, x, i * D, D);
            float[] h = m.forward(x, 1, prompt.length);
            double[] logits = new double[prompt.length * PADDED];
            for (int p = 0; p < prompt.length; p++)
                for (int v = 0; v < rows; v++) {
                    double s = 0;
                    for (int j = 0; j < D; j++) s += (double) head[v * D + j] * h[p * D + j];
                    logits[p * PADDED + v] = s;
                }
            return logits;
        }
    }

    private static double relL2(float[] a, double[] b) {
        double n = 0, d = 0;
        for (int i = 0; i < a.length; i++) {
            n += (a[i] - b[i]) * (a[i] - b[i]);
            d += b[i] * b[i];
        }
        return Math.sqrt(n / d);
    }

    private static final int[] PROMPT = {2, 3, 4, 4, 5, 6, 7, 5, 8, 4, 9, 19};

    @Test
    void tiedAndUntiedHeadsMatchAnIndependentComputation() throws IOException {
        for (boolean tie : new boolean[] {true, false}) {
            Map<String, SafeTensors.Entry> t = hfTensors(tie, PADDED, tie ? 1 : 2);
            try (MambaLM lm = MambaLM.fromPretrained(folder("m" + tie, tie, t), Device.cpu(), DType.F32)) {
                assertEquals(tie, lm.model().tieEmbeddings());
                float[] logits = lm.logits(PROMPT);
                double err = relL2(logits, expectedLogits(t, tie, PROMPT));
                assertTrue(err < 1e-5, "tie=" + tie + " rel L2 " + err);
            }
        }
    }

    @Test
    void prefillThenStepsMatchFullForward() throws IOException {
        Map<String, SafeTensors.Entry> t = hfTensors(true, PADDED, 3);
        try (MambaLM lm = MambaLM.fromPretrained(folder("m", true, t), Device.cpu(), DType.F32);
             MambaState s = lm.model().newState(1)) {
            float[] all = lm.logits(PROMPT);
            float[] last = new float[PADDED];
            lm.model().prefillTokens(s, java.util.Arrays.copyOf(PROMPT, 8), 8, last);
            assertArrayEquals(java.util.Arrays.copyOfRange(all, 7 * PADDED, 8 * PADDED), last, 1e-5f);
            for (int i = 8; i < PROMPT.length; i++) {
                lm.model().stepTokens(s, new int[] {PROMPT[i]}, last);
                assertArrayEquals(java.util.Arrays.copyOfRange(all, i * PADDED, (i + 1) * PADDED), last, 1e-5f, "pos " + i);
            }
        }
    }

    @Test
    void shardedIndexLoadsTheSameWeights() throws IOException {
        Map<String, SafeTensors.Entry> t = hfTensors(true, PADDED, 4);
        Path single = folder("single", true, t);
        Path sharded = dir.resolve("sharded");
        Files.createDirectories(sharded);
        Files.copy(single.resolve("config.json"), sharded.resolve("config.json"));
        List<SafeTensors.Entry> a = new ArrayList<>(), b = new ArrayList<>();
        StringBuilder map = new StringBuilder();
        int i = 0;
        for (SafeTensors.Entry e : t.values()) {
            String file = (i++ % 2 == 0) ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
            (file.contains("00001") ? a : b).add(e);
            map.append(map.length() == 0 ? "" : ",").append('"').append(e.name()).append("\": \"").append(file).append('"');
        }
        SafeTensors.write(sharded.resolve("model-00001-of-00002.safetensors"), Map.of(), a);
        SafeTensors.write(sharded.resolve("model-00002-of-00002.safetensors"), Map.of(), b);
        Files.writeString(sharded.resolve("model.safetensors.index.json"), "{\"metadata\": {}, \"weight_map\": {" + map + "}}");
        try (MambaLM one = MambaLM.fromPretrained(single, Device.cpu(), DType.F32);
             MambaLM two = MambaLM.fromPretrained(sharded, Device.cpu(), DType.F32)) {
            assertArrayEquals(one.logits(PROMPT), two.logits(PROMPT), 0f);
            assertEquals(null, two.tokenizer());
        }
        // A shard that escapes the folder is refused.
        Files.writeString(sharded.resolve("model.safetensors.index.json"),
                "{\"weight_map\": {\"backbone.norm_f.weight\": \"../single/model.safetensors\"}}");
        assertThrows(CheckpointException.class, () -> MambaLM.fromPretrained(sharded, Device.cpu(), DType.F32));
    }

    @Test
    void vocabularyIsPaddedAndOriginalKeyNamesLoad() throws IOException {
        // The original state-spaces format: config vocab 22 padded to a multiple of 8 → 24 rows (zeros beyond
        // the 22 in the file), and the key "backbone.embedding.weight".
        Map<String, SafeTensors.Entry> t = hfTensors(true, VOCAB, 5);
        SafeTensors.Entry e = t.remove("backbone.embeddings.weight");
        t.put("backbone.embedding.weight", new SafeTensors.Entry("backbone.embedding.weight", e.shape(), e.data()));
        Path f = dir.resolve("orig");
        Files.createDirectories(f);
        Files.writeString(f.resolve("config.json"), "{\"d_model\": " + D + ", \"n_layer\": " + LAYERS + ", \"vocab_size\": "
                + VOCAB + ", \"ssm_cfg\": {\"d_state\": 8}, \"rms_norm\": true, \"residual_in_fp32\": true,"
                + " \"pad_vocab_size_multiple\": 8, \"tie_embeddings\": true}");
        SafeTensors.write(f.resolve("model.safetensors"), Map.of(), new ArrayList<>(t.values()));
        try (MambaLM lm = MambaLM.fromPretrained(f, Device.cpu(), DType.F32)) {
            assertEquals(VOCAB, lm.vocabSize());
            assertEquals(PADDED, lm.model().vocabSize());
            float[] emb = lm.model().getParameter("backbone.embeddings.weight");
            for (int i = VOCAB * D; i < PADDED * D; i++) assertEquals(0f, emb[i]);
            // Sampling never picks a padding id.
            int[] out = lm.generate(PROMPT, Sampling.ofTemperature(5).seed(1).maxNewTokens(64), TokenListener.NONE);
            for (int tok : out) assertTrue(tok < VOCAB, "padding token " + tok + " sampled");
        }
    }

    /**
     * A HuggingFace folder whose vocabulary of 1 is padded to 65536 rows: the loader would invent 65535 of them; it is
     * refused before allocating them (mamba-api's HostileSizeClaimsTest holds the other size claims to this bound).
     */
    @Test
    void paddedVocabularyClaimsAreRejectedCheaply() throws Exception {
        Path folder = Files.createDirectories(dir.resolve("hf"));
        Map<String, long[]> shapes = MambaModel.builder(Mamba1Config.builder().dModel(64).dState(2).dConv(2).expand(1).dtRank(1)
                .layers(1).build()).vocabSize(65536).parameterShapes();
        List<SafeTensors.Entry> tensors = new ArrayList<>();
        for (Map.Entry<String, long[]> e : shapes.entrySet()) {
            long[] shape = e.getKey().equals("backbone.embeddings.weight") ? new long[] {1, 64} : e.getValue();
            long n = 1;
            for (long d : shape) n *= d;
            float[] v = new float[(int) n];
            java.util.Arrays.fill(v, 0.5f);
            tensors.add(new SafeTensors.Entry(e.getKey(), shape, v));
        }
        SafeTensors.write(folder.resolve("model.safetensors"), Map.of("format", "pt"), tensors);
        Files.writeString(folder.resolve("config.json"), "{\"d_model\": 64, \"n_layer\": 1, \"vocab_size\": 1,"
                + " \"pad_vocab_size_multiple\": 65536, \"ssm_cfg\": {\"d_state\": 2, \"d_conv\": 2, \"expand\": 1, \"dt_rank\": 1}}");
        FuzzChecks.assertRejectedCheaply(folder, () -> MambaLM.fromPretrained(folder, Device.cpu(), DType.F32).close());
    }

    @Test
    void seededGenerationIsReproducibleAndBatchRowsEqualSingleRuns() throws IOException {
        Path f = folder("gen", true, hfTensors(true, PADDED, 6));
        Sampling s = Sampling.ofTemperature(3.0).topK(20).seed(42).maxNewTokens(20);
        try (MambaLM lm = MambaLM.fromPretrained(f, Device.cpu(), DType.F32)) {
            int[] p1 = {2, 3, 4}, p2 = {6, 7, 5, 8, 4, 9};
            int[] a = lm.generate(p1, s, TokenListener.NONE);
            assertArrayEquals(a, lm.generate(p1, s, TokenListener.NONE));
            int[] other = lm.generate(p1, s.seed(43), TokenListener.NONE);
            assertFalse(java.util.Arrays.equals(a, other), java.util.Arrays.toString(a) + " vs " + java.util.Arrays.toString(other));
            int[] b = lm.generate(p2, s, TokenListener.NONE);
            AtomicInteger streamed = new AtomicInteger();
            int[][] both = lm.generate(new int[][] {p1, p2}, s, (row, tok) -> streamed.incrementAndGet());
            assertArrayEquals(a, both[0]);
            assertArrayEquals(b, both[1]);
            assertEquals(a.length + b.length, streamed.get());
            int[] greedy = lm.generate(p1, Sampling.greedy().maxNewTokens(5).stopTokens(a[0]), TokenListener.NONE);
            assertTrue(greedy.length >= 1 && greedy.length <= 5);
        }
    }

    @Test
    void textGenerationStreamsThroughTheTokenizer() throws IOException {
        Path f = folder("text", true, hfTensors(true, PADDED, 7));
        try (MambaLM lm = MambaLM.fromPretrained(f, Device.cpu(), DType.F32)) {
            StringBuilder streamed = new StringBuilder();
            String text = lm.generate("hello world", Sampling.greedy().maxNewTokens(8), streamed::append);
            assertEquals(text, streamed.toString());
            int[] ids = lm.generate(lm.tokenizer().encode("hello world"), Sampling.greedy().maxNewTokens(8), TokenListener.NONE);
            int cut = ids.length;
            for (int i = 0; i < ids.length; i++) if (ids[i] == 0) { cut = i; break; }  // <|endoftext|> stops text generation
            assertEquals(lm.tokenizer().decode(java.util.Arrays.copyOf(ids, cut), true), text);
        }
    }

    @Test
    void malformedFoldersAreRejected() throws IOException {
        Map<String, SafeTensors.Entry> t = hfTensors(true, PADDED, 8);
        assertThrows(CheckpointException.class, () -> MambaLM.fromPretrained(dir.resolve("absent"), Device.cpu(), DType.F32));
        Map<String, SafeTensors.Entry> missing = new LinkedHashMap<>(t);
        missing.remove("backbone.layers.1.mixer.A_log");
        assertMessage(folder("missing", true, missing), "missing tensor");
        Map<String, SafeTensors.Entry> extra = new LinkedHashMap<>(t);
        extra.put("backbone.layers.9.mixer.D", new SafeTensors.Entry("backbone.layers.9.mixer.D", new long[] {4}, new float[4]));
        assertMessage(folder("extra", true, extra), "unexpected tensor");
        Map<String, SafeTensors.Entry> shape = new LinkedHashMap<>(t);
        SafeTensors.Entry w = shape.get("backbone.layers.0.mixer.in_proj.weight");
        shape.put(w.name(), new SafeTensors.Entry(w.name(), new long[] {D, 2 * 2 * D}, w.data()));  // transposed
        assertMessage(folder("shape", true, shape), "shape");
        Path noWeights = dir.resolve("noweights");
        Files.createDirectories(noWeights);
        Files.writeString(noWeights.resolve("config.json"), config(true, PADDED));
        assertMessage(noWeights, "neither model.safetensors");
        Path badConfig = folder("badconfig", true, t);
        Files.writeString(badConfig.resolve("config.json"), "{\"model_type\": \"falcon_mamba\"}");
        assertMessage(badConfig, "falcon_mamba");
        // each size within its own limit, the inner width (expand × hidden_size) beyond libmamba's: still a CheckpointException
        Files.writeString(badConfig.resolve("config.json"), "{\"model_type\": \"mamba\", \"hidden_size\": 65536,"
                + " \"num_hidden_layers\": 1, \"vocab_size\": 8, \"expand\": 2}");
        assertMessage(badConfig, "dInner");
    }

    private static void assertMessage(Path folder, String word) {
        CheckpointException e = assertThrows(CheckpointException.class, () -> MambaLM.fromPretrained(folder, Device.cpu(), DType.F32));
        assertTrue(e.getMessage().contains(word), "'" + e.getMessage() + "' should mention " + word);
    }
}
