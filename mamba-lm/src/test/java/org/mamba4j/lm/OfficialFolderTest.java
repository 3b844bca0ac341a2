package org.mamba4j.lm;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.function.Consumer;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.mamba4j.CheckpointException;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.Mamba1Config;
import org.mamba4j.Mamba3Config;
import org.mamba4j.MambaModel;
import org.mamba4j.io.SafeTensors;
import org.mamba4j.io.SafeTensorsFile;
import org.mamba4j.io.TensorInfo;

/**
 * Official state-spaces/mamba folders of Mamba-3 language models: {@link MambaLM#saveOfficial} writes the names,
 * shapes and config.json of {@code MambaLMHeadModel}, and {@link MambaLM#fromPretrained} reads them back bit for bit;
 * corrupt folders fail with a {@link CheckpointException}.
 */
class OfficialFolderTest {
    /** d_model 32, expand 2 (d_inner 64), headdim 16 (4 heads), d_state 16 (4 rotary angles), 2 layers. */
    private static final Mamba3Config TINY = Mamba3Config.builder().dModel(32).layers(2).dState(16).headdim(16).build();
    private static final int VOCAB = 50, PADDED = 56;  // 50 padded to a multiple of 8

    @TempDir Path dir;

    /** A tiny Mamba-3 LM with every weight random (no 0/1 initial values that would hide a mix-up). */
    static MambaLM tinyLm(Mamba3Config config, boolean tie, long seed) {
        MambaModel model = MambaModel.builder(config).vocabSize(PADDED).tieEmbeddings(tie).seed(seed).build();
        randomize(model, seed);
        return new MambaLM(model, VOCAB, null);
    }

    /** Every weight random (norms and D around 1), so no 0/1 initial value hides a mix-up of tensors. */
    static void randomize(MambaModel model, long seed) {
        Random rng = new Random(seed);
        for (String name : model.parameterNames()) {
            float[] v = model.getParameter(name);
            for (int i = 0; i < v.length; i++) v[i] = (float) (name.contains("norm") || name.endsWith(".D")
                    ? 0.5 + rng.nextDouble() : 0.2 * rng.nextGaussian());
            model.setParameter(name, v);
        }
    }

    /** The official per-layer tensors of mamba3-siso.md §2 for a config, with their shapes. */
    private static Map<String, long[]> officialTensors(Mamba3Config c, int padded, boolean tie) {
        long D = c.dModel(), E = c.dInner(), H = c.nheads(), N = c.dState();
        long width = 2 * E + 2L * c.ngroups() * N + 3 * H + c.ropeAngles();
        Map<String, long[]> t = new LinkedHashMap<>();
        t.put("backbone.embedding.weight", new long[] {padded, D});
        for (int i = 0; i < c.layers(); i++) {
            String p = "backbone.layers." + i + ".";
            t.put(p + "norm.weight", new long[] {D});
            t.put(p + "mixer.in_proj.weight", new long[] {width, D});
            t.put(p + "mixer.dt_bias", new long[] {H});
            t.put(p + "mixer.B_bias", new long[] {H, 1, N});
            t.put(p + "mixer.C_bias", new long[] {H, 1, N});
            t.put(p + "mixer.B_norm.weight", new long[] {N});
            t.put(p + "mixer.C_norm.weight", new long[] {N});
            t.put(p + "mixer.D", new long[] {H});
            if (c.outprojNorm()) t.put(p + "mixer.norm.weight", new long[] {E});
            t.put(p + "mixer.out_proj.weight", new long[] {D, E});
        }
        t.put("backbone.norm_f.weight", new long[] {D});
        t.put("lm_head.weight", new long[] {padded, D});  // tied or not, the official state dict lists it
        return t;
    }

    private static Map<String, long[]> stored(Path file) {
        Map<String, long[]> m = new LinkedHashMap<>();
        try (SafeTensorsFile f = SafeTensorsFile.open(file)) {
            for (TensorInfo t : f.tensors()) m.put(t.name(), t.shape());
        }
        return m;
    }

    private static void assertSameTensors(Map<String, long[]> want, Map<String, long[]> got) {
        assertEquals(new java.util.TreeSet<>(want.keySet()), new java.util.TreeSet<>(got.keySet()));
        for (String name : want.keySet()) assertArrayEquals(want.get(name), got.get(name), name);
    }

    @Test
    void writesTheOfficialNamesShapesAndConfig() throws IOException {
        Path out = dir.resolve("m3");
        try (MambaLM lm = tinyLm(TINY, true, 1)) {
            lm.saveOfficial(out);
        }
        try (Stream<Path> files = Files.list(out)) {
            assertEquals(List.of("config.json", "model.safetensors"), files.map(p -> p.getFileName().toString()).sorted().toList());
        }
        Map<String, long[]> got = stored(out.resolve("model.safetensors"));
        assertSameTensors(officialTensors(TINY, PADDED, true), got);
        assertArrayEquals(new long[] {176, 32}, got.get("backbone.layers.1.mixer.in_proj.weight"));  // 2·64 + 2·16 + 3·4 + 4
        JsonNode cfg = new ObjectMapper().readTree(out.resolve("config.json").toFile());
        assertEquals(32, cfg.get("d_model").intValue());
        assertEquals(0, cfg.get("d_intermediate").intValue());
        assertEquals(2, cfg.get("n_layer").intValue());
        assertEquals(VOCAB, cfg.get("vocab_size").intValue());
        assertEquals(8, cfg.get("pad_vocab_size_multiple").intValue());
        assertTrue(cfg.get("tie_embeddings").booleanValue());
        assertTrue(cfg.get("rms_norm").booleanValue());
        assertTrue(cfg.get("attn_layer_idx").isArray() && cfg.get("attn_layer_idx").isEmpty());
        JsonNode ssm = cfg.get("ssm_cfg");
        assertEquals("Mamba3", ssm.get("layer").textValue());
        assertEquals(16, ssm.get("d_state").intValue());
        assertEquals(16, ssm.get("headdim").intValue());
        assertEquals(2, ssm.get("expand").intValue());
        assertEquals(1, ssm.get("ngroups").intValue());
        assertEquals(0.5, ssm.get("rope_fraction").doubleValue());
        assertEquals(1e-4, ssm.get("A_floor").doubleValue());
        assertEquals(64, ssm.get("chunk_size").intValue());
        assertFalse(ssm.get("is_outproj_norm").booleanValue());
        assertTrue(Mamba3LMConfig.isMamba3(out));
    }

    /** The official parameter list at the official defaults (d_model 1024): in_proj is 4480 wide. Nothing is allocated. */
    @Test
    void officialDefaultsAtDModel1024() {
        Mamba3Config c = Mamba3Config.builder().dModel(1024).layers(2).build();
        assertEquals(4480, c.inProjWidth());
        Map<String, long[]> ours = MambaModel.builder(c).vocabSize(50280).parameterShapes();
        Map<String, long[]> official = officialTensors(c, 50280, true);
        official.remove("lm_head.weight");  // tied: one matrix, HF's embedding name inside mamba4j
        official.put("backbone.embeddings.weight", official.remove("backbone.embedding.weight"));
        assertSameTensors(official, ours);
        assertArrayEquals(new long[] {4480, 1024}, ours.get("backbone.layers.0.mixer.in_proj.weight"));
        assertArrayEquals(new long[] {32, 1, 128}, ours.get("backbone.layers.0.mixer.B_bias"));
        assertArrayEquals(new long[] {1024, 2048}, ours.get("backbone.layers.1.mixer.out_proj.weight"));
        // is_outproj_norm adds the gate norm [d_inner]; untied adds lm_head
        Mamba3Config norm = c.toBuilder().outprojNorm(true).ngroups(2).build();
        Map<String, long[]> untied = MambaModel.builder(norm).vocabSize(50280).tieEmbeddings(false).parameterShapes();
        assertArrayEquals(new long[] {2048}, untied.get("backbone.layers.0.mixer.norm.weight"));
        assertArrayEquals(new long[] {50280, 1024}, untied.get("lm_head.weight"));
        assertArrayEquals(new long[] {2 * 2048 + 2 * 2 * 128 + 3 * 32 + 32, 1024}, untied.get("backbone.layers.0.mixer.in_proj.weight"));
        // the README's example
        Mamba3Config readme = Mamba3Config.builder().dModel(256).layers(4).dState(64).headdim(32).build();
        assertArrayEquals(new long[] {1216, 256}, MambaModel.builder(readme).vocabSize(50280).parameterShapes()
                .get("backbone.layers.0.mixer.in_proj.weight"));
    }

    /** save → load gives the same configuration and every weight bit for bit, tied and untied, with every option. */
    @Test
    void roundTripIsBitExact() {
        Mamba3Config[] configs = {TINY, TINY.toBuilder().outprojNorm(true).ngroups(2).ropeFraction(1.0).chunkSize(16).aFloor(0.0625)
                .dtMin(0.002).dtMax(0.05).dtInitFloor(0.001).expand(3).build()};
        int n = 0;
        for (Mamba3Config c : configs)
            for (boolean tie : new boolean[] {true, false}) {
                Path out = dir.resolve("rt" + n++);
                try (MambaLM lm = tinyLm(c, tie, n)) {
                    lm.saveOfficial(out);
                    assertSameTensors(officialTensors(c, PADDED, tie), stored(out.resolve("model.safetensors")));
                    try (MambaLM back = MambaLM.fromPretrained(out, Device.cpu(), DType.F32)) {
                        assertEquals(c, back.model().config());
                        assertInstanceOf(Mamba3Config.class, back.model().config());
                        assertEquals(VOCAB, back.vocabSize());
                        assertEquals(PADDED, back.model().vocabSize());
                        assertEquals(tie, back.model().tieEmbeddings());
                        assertNull(back.tokenizer());
                        assertEquals(lm.model().parameterNames(), back.model().parameterNames());
                        for (String name : lm.model().parameterNames()) {
                            assertArrayEquals(lm.model().parameterShape(name), back.model().parameterShape(name), name);
                            assertArrayEquals(bits(lm.model().getParameter(name)), bits(back.model().getParameter(name)), name);
                        }
                    }
                }
            }
    }

    /** Saving over an existing folder replaces both files and leaves no temporary file behind. */
    @Test
    void overwritingLeavesOnlyTheTwoFiles() throws IOException {
        Path out = dir.resolve("again");
        try (MambaLM a = tinyLm(TINY, true, 1); MambaLM b = tinyLm(TINY, false, 2)) {
            a.saveOfficial(out);
            b.saveOfficial(out);
            try (Stream<Path> files = Files.list(out)) {
                assertEquals(2, files.count());
            }
            try (MambaLM back = MambaLM.fromPretrained(out, Device.cpu(), DType.F32)) {
                assertFalse(back.model().tieEmbeddings());
                assertArrayEquals(bits(b.model().getParameter("lm_head.weight")), bits(back.model().getParameter("lm_head.weight")));
            }
        }
    }

    /** A model the official format cannot describe is refused before anything is written. */
    @Test
    void refusesWhatTheOfficialFormatCannotHold() {
        Path out = dir.resolve("never");
        try (MambaLM lm = new MambaLM(MambaModel.builder(TINY.toBuilder().normEps(1e-6).build()).vocabSize(PADDED).build(), VOCAB, null)) {
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> lm.saveOfficial(out));
            assertTrue(e.getMessage().contains("normEps"), e.getMessage());
        }
        assertFalse(Files.exists(out));
        MambaLM closed = tinyLm(TINY, true, 1);
        closed.close();
        assertThrows(IllegalStateException.class, () -> closed.saveOfficial(out));
    }

    /** The vocabulary padding multiple is chosen so vocab_size pads to exactly the model's rows. */
    @Test
    void padMultiple() {
        assertEquals(8, OfficialFolder.padMultiple(50277, 50280));
        assertEquals(8, OfficialFolder.padMultiple(56, 56));
        assertEquals(1, OfficialFolder.padMultiple(55, 55));
        assertEquals(12, OfficialFolder.padMultiple(50, 60));  // the smallest m with ⌈50/m⌉·m = 60
        assertEquals(60, OfficialFolder.padMultiple(1, 60));
    }

    /** A Mamba-1 LM saved in the official layout (ssm_cfg.layer "Mamba1") reads back bit for bit too. */
    @Test
    void mamba1RoundTrip() {
        Mamba1Config c = Mamba1Config.builder().dModel(32).layers(2).dState(8).build();
        Path out = dir.resolve("m1");
        try (MambaLM lm = new MambaLM(MambaModel.builder(c).vocabSize(PADDED).seed(5).build(), VOCAB, null)) {
            lm.saveOfficial(out);
            assertFalse(Mamba3LMConfig.isMamba3(out));
            assertTrue(stored(out.resolve("model.safetensors")).containsKey("backbone.embedding.weight"));
            try (MambaLM back = MambaLM.fromPretrained(out, Device.cpu(), DType.F32)) {
                assertEquals(c, back.model().config());
                assertEquals(VOCAB, back.vocabSize());
                for (String name : lm.model().parameterNames())
                    assertArrayEquals(bits(lm.model().getParameter(name)), bits(back.model().getParameter(name)), name);
            }
        }
    }

    /** An official folder without the duplicate lm_head (or with HF's embedding spelling) loads too. */
    @Test
    void tiedHeadMayBeAbsentAndTheEmbeddingSpelledEitherWay() {
        Path out = save("lean", TINY, true);
        rewrite(out, l -> {
            l.removeIf(e -> e.name().equals("lm_head.weight"));
            for (int i = 0; i < l.size(); i++)
                if (l.get(i).name().equals("backbone.embedding.weight"))
                    l.set(i, new SafeTensors.Entry("backbone.embeddings.weight", l.get(i).shape(), l.get(i).data()));
        });
        try (MambaLM back = MambaLM.fromPretrained(out, Device.cpu(), DType.F32)) {
            assertEquals(TINY, back.model().config());
        }
    }

    @Test
    void corruptFoldersFailClearly() throws IOException {
        assertRejected(rewrite(save("missing", TINY, true), l -> l.removeIf(e -> e.name().equals("backbone.layers.1.mixer.D"))),
                "missing tensor 'backbone.layers.1.mixer.D'");
        assertRejected(rewrite(save("extra", TINY, true), l -> l.add(new SafeTensors.Entry("backbone.layers.0.mixer.conv1d.weight",
                new long[] {2}, new float[] {1, 2}))), "unexpected tensor 'backbone.layers.0.mixer.conv1d.weight'");
        // B_bias flattened to mamba-rs's [nheads, d_state]: the official shape is [nheads, 1, d_state]
        assertRejected(rewrite(save("bshape", TINY, true), l -> replace(l, "backbone.layers.0.mixer.B_bias",
                e -> new SafeTensors.Entry(e.name(), new long[] {4, 16}, e.data()))), "'backbone.layers.0.mixer.B_bias' has shape [4, 16]");
        assertRejected(rewrite(save("nan", TINY, true), l -> replace(l, "backbone.layers.0.mixer.dt_bias", e -> {
            e.data()[2] = Float.NaN;
            return e;
        })), "non-finite");
        assertRejected(rewrite(save("rows", TINY, true), l -> replace(l, "backbone.embedding.weight",
                e -> new SafeTensors.Entry(e.name(), new long[] {10, 32}, java.util.Arrays.copyOf(e.data(), 320)))), "has shape [10, 32]");
        // a config that says Mamba-3 over Mamba-1 weights
        Path m1 = dir.resolve("m1weights");
        try (MambaLM lm = new MambaLM(MambaModel.builder(Mamba1Config.builder().dModel(32).layers(2).dState(16).build())
                .vocabSize(PADDED).build(), VOCAB, null)) {
            lm.saveOfficial(m1);
        }
        Files.copy(save("cfg", TINY, true).resolve("config.json"), m1.resolve("config.json"), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        assertRejected(m1, "unexpected tensor");
        // config.json problems name the key
        Path mimo = save("mimo", TINY, true);
        Files.writeString(mimo.resolve("config.json"), Files.readString(mimo.resolve("config.json"))
                .replace("\"is_outproj_norm\" : false", "\"is_outproj_norm\" : false, \"is_mimo\" : true"));
        assertRejected(mimo, "'ssm_cfg.is_mimo'");
        Path layers = save("layers", TINY, true);
        Files.writeString(layers.resolve("config.json"), Files.readString(layers.resolve("config.json"))
                .replace("\"n_layer\" : 2", "\"n_layer\" : 3"));
        assertRejected(layers, "missing tensor 'backbone.layers.2.norm.weight'");
        Path huge = save("huge", TINY, true);
        Files.writeString(huge.resolve("config.json"), Files.readString(huge.resolve("config.json"))
                .replace("\"d_model\" : 32", "\"d_model\" : 4096"));
        assertRejected(huge, "has shape");
        // a truncated weights file
        Path cut = save("cut", TINY, true);
        byte[] bytes = Files.readAllBytes(cut.resolve("model.safetensors"));
        Files.write(cut.resolve("model.safetensors"), java.util.Arrays.copyOf(bytes, bytes.length / 2));
        assertThrows(CheckpointException.class, () -> MambaLM.fromPretrained(cut, Device.cpu(), DType.F32));
        // no weights at all
        Path bare = save("bare", TINY, true);
        Files.delete(bare.resolve("model.safetensors"));
        assertRejected(bare, "neither model.safetensors");
    }

    /**
     * The loaded model computes what the saved one does: logits bit for bit, and the same greedy continuation.
     * Needs the Mamba-3 forward kernels.
     */
    @Test
    void loadedModelGeneratesExactlyAsTheOriginal() {
        Path out = dir.resolve("gen");
        int[] prompt = {3, 14, 15, 9, 26, 5, 35, 8, 9, 7};
        try (MambaLM lm = tinyLm(TINY, true, 11)) {
            lm.saveOfficial(out);
            float[] want = lm.logits(prompt);
            int[] wantTokens = lm.generate(prompt, Sampling.greedy().maxNewTokens(12), (row, tok) -> { });
            try (MambaLM back = MambaLM.fromPretrained(out, Device.cpu(), DType.F32)) {
                float[] got = back.logits(prompt);
                assertEquals(prompt.length * PADDED, got.length);
                assertArrayEquals(bits(want), bits(got));
                double spread = 0;
                for (int v = 0; v < VOCAB; v++) {
                    assertTrue(Float.isFinite(got[v]), "logit " + v);
                    spread = Math.max(spread, Math.abs(got[v] - got[0]));
                }
                assertTrue(spread > 1e-4, "the logits of a random model differ between tokens: " + spread);
                int[] gotTokens = back.generate(prompt, Sampling.greedy().maxNewTokens(12), (row, tok) -> { });
                assertArrayEquals(wantTokens, gotTokens);
                assertEquals(12, gotTokens.length);
                for (int t : gotTokens) assertTrue(t >= 0 && t < VOCAB, "token " + t);
            }
        }
    }

    // ---- helpers ----

    private Path save(String name, Mamba3Config c, boolean tie) {
        Path out = dir.resolve(name);
        try (MambaLM lm = tinyLm(c, tie, 7)) {
            lm.saveOfficial(out);
        }
        return out;
    }

    private static Path rewrite(Path folder, Consumer<List<SafeTensors.Entry>> change) {
        Path file = folder.resolve("model.safetensors");
        List<SafeTensors.Entry> entries = new ArrayList<>();
        Map<String, String> meta;
        try (SafeTensorsFile f = SafeTensorsFile.open(file)) {
            meta = f.metadata();
            for (TensorInfo t : f.tensors()) entries.add(new SafeTensors.Entry(t.name(), t.shape(), f.readFloats(t.name())));
        }
        change.accept(entries);
        SafeTensors.write(file, meta, entries);
        return folder;
    }

    private static void replace(List<SafeTensors.Entry> l, String name, java.util.function.UnaryOperator<SafeTensors.Entry> f) {
        for (int i = 0; i < l.size(); i++) if (l.get(i).name().equals(name)) l.set(i, f.apply(l.get(i)));
    }

    private static void assertRejected(Path folder, String fragment) {
        CheckpointException e = assertThrows(CheckpointException.class, () -> MambaLM.fromPretrained(folder, Device.cpu(), DType.F32));
        assertTrue(e.getMessage().contains(fragment), "'" + fragment + "' not in: " + e.getMessage());
    }

    private static int[] bits(float[] v) {
        int[] b = new int[v.length];
        for (int i = 0; i < v.length; i++) b[i] = Float.floatToRawIntBits(v[i]);
        return b;
    }
}
