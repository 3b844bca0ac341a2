package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.function.Consumer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.mamba4j.io.SafeTensors;
import org.mamba4j.io.SafeTensorsFile;

/** Saving and loading models: bit-exact round trips, HF names, and every corrupt-file case rejected. */
class CheckpointTest {
    @TempDir Path dir;

    private static MambaModel model(long seed) {
        MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(32).layers(2).dState(4).build())
                .inputDim(3).seed(seed).build();
        TestUtil.randomizeWeights(m, new Random(seed));
        return m;
    }

    @Test
    void saveLoadIsBitExactAndOutputsMatch() {
        Path f = dir.resolve("m.safetensors");
        Random rng = new Random(1);
        try (MambaModel a = model(11)) {
            a.save(f);
            try (MambaModel b = MambaModel.load(f); MambaState sa = a.newState(2); MambaState sb = b.newState(2)) {
                assertEquals(a.config(), b.config());
                assertEquals(3, b.inputDim());
                for (String n : a.parameterNames()) assertArrayEquals(a.getParameter(n), b.getParameter(n), 0f, n);
                float[] x = TestUtil.random(rng, 2 * 3 * 7, 1);
                assertArrayEquals(a.prefill(sa, x, 7), b.prefill(sb, x, 7), 0f);
            }
        }
    }

    @Test
    void fileUsesHuggingFaceNamesAndPytorchShapes() {
        Path f = dir.resolve("m.safetensors");
        try (MambaModel a = model(12)) {
            a.save(f);
        }
        try (SafeTensorsFile st = SafeTensorsFile.open(f)) {
            assertArrayEquals(new long[] {2 * 64, 32}, st.get("backbone.layers.1.mixer.in_proj.weight").shape());
            assertArrayEquals(new long[] {64, 1, 4}, st.get("backbone.layers.0.mixer.conv1d.weight").shape());
            assertArrayEquals(new long[] {2 + 8, 64}, st.get("backbone.layers.0.mixer.x_proj.weight").shape());
            assertArrayEquals(new long[] {32, 64}, st.get("backbone.layers.0.mixer.out_proj.weight").shape());
            assertArrayEquals(new long[] {64, 4}, st.get("backbone.layers.0.mixer.A_log").shape());
            assertEquals("mamba1", st.metadata().get("arch"));
        }
    }

    @Test
    void loadWeightsIntoExistingModelAndFailedLoadLeavesItUntouched() throws IOException {
        Path good = dir.resolve("good.safetensors");
        try (MambaModel a = model(13); MambaModel b = model(14)) {
            a.save(good);
            float[] before = b.getParameter("backbone.norm_f.weight");
            // A truncated copy must fail and change nothing.
            Path bad = dir.resolve("bad.safetensors");
            byte[] bytes = Files.readAllBytes(good);
            Files.write(bad, java.util.Arrays.copyOf(bytes, bytes.length - 100));
            assertThrows(CheckpointException.class, () -> b.loadWeights(bad));
            assertArrayEquals(before, b.getParameter("backbone.norm_f.weight"), 0f);
            b.loadWeights(good);
            for (String n : a.parameterNames()) assertArrayEquals(a.getParameter(n), b.getParameter(n), 0f, n);
        }
        try (MambaModel other = MambaModel.builder(Mamba1Config.builder().dModel(16).layers(2).dState(4).build()).inputDim(3).build()) {
            CheckpointException e = assertThrows(CheckpointException.class, () -> other.loadWeights(good));
            assertTrue(e.getMessage().contains("another shape"), e.getMessage());
        }
    }

    @Test
    void saveIsAtomicOverAnExistingFile() throws IOException {
        Path f = dir.resolve("m.safetensors");
        try (MambaModel a = model(15); MambaModel b = model(16)) {
            a.save(f);
            b.save(f);
            try (MambaModel c = MambaModel.load(f)) {
                assertArrayEquals(b.getParameter("input_proj.weight"), c.getParameter("input_proj.weight"), 0f);
            }
        }
        try (var files = Files.list(dir)) {
            assertEquals(1, files.count(), "no temp files left behind");
        }
    }

    // ---- corrupt and hostile files: each must throw CheckpointException, never crash or allocate wildly ----

    private Path savedModel() {
        Path f = dir.resolve("src.safetensors");
        try (MambaModel a = model(17)) {
            a.save(f);
        }
        return f;
    }

    private void assertRejected(Path f, String expectedWord) {
        CheckpointException e = assertThrows(CheckpointException.class, () -> MambaModel.load(f));
        assertTrue(e.getMessage().toLowerCase().contains(expectedWord.toLowerCase()),
                "message should mention '" + expectedWord + "': " + e.getMessage());
    }

    @Test
    void truncatedFile() throws IOException {
        byte[] b = Files.readAllBytes(savedModel());
        Path f = dir.resolve("t.safetensors");
        Files.write(f, java.util.Arrays.copyOf(b, b.length / 2));
        assertRejected(f, "safetensors");
        Files.write(f, java.util.Arrays.copyOf(b, 5));
        assertRejected(f, "safetensors");
    }

    @Test
    void absurdHeaderLength() throws IOException {
        byte[] b = Files.readAllBytes(savedModel());
        ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN).putLong(0, Long.MAX_VALUE / 2);
        Path f = dir.resolve("h.safetensors");
        Files.write(f, b);
        assertRejected(f, "header");
    }

    @Test
    void missingExtraWrongShapeWrongDtypeAndWrongArchitecture() {
        Path src = savedModel();
        Map<String, String> meta;
        List<SafeTensors.Entry> entries = new ArrayList<>();
        try (SafeTensorsFile st = SafeTensorsFile.open(src)) {
            meta = new LinkedHashMap<>(st.metadata());
            for (var t : st.tensors()) entries.add(new SafeTensors.Entry(t.name(), t.shape(), st.readFloats(t.name())));
        }
        assertRejected(rewrite("missing", meta, entries, l -> l.remove(3)), "missing tensor");
        assertRejected(rewrite("extra", meta, entries, l -> l.add(new SafeTensors.Entry("extra.weight", new long[] {2}, new float[] {1, 2}))),
                "unexpected tensor");
        assertRejected(rewrite("shape", meta, entries, l -> {
            SafeTensors.Entry e = l.get(0);  // input_proj.weight [32, 3] flattened to [96]
            l.set(0, new SafeTensors.Entry(e.name(), new long[] {e.data().length}, e.data()));
        }), "shape");
        assertRejected(rewrite("nan", meta, entries, l -> l.get(0).data()[0] = Float.NaN), "non-finite");
        Map<String, String> arch = new LinkedHashMap<>(meta);
        arch.put("arch", "mamba9");
        assertRejected(rewrite("arch", arch, entries, l -> {}), "architecture");
        Map<String, String> otherArch = new LinkedHashMap<>(meta);  // a Mamba-1 config under the Mamba-3 tag
        otherArch.put("arch", "mamba3");
        assertRejected(rewrite("arch3", otherArch, entries, l -> {}), "'headdim' is missing");
        Map<String, String> cfg = new LinkedHashMap<>(meta);
        cfg.put("config", "{\"d_model\": -4}");
        assertRejected(rewrite("cfg", cfg, entries, l -> {}), "config");
        Map<String, String> notOurs = new LinkedHashMap<>();
        assertRejected(rewrite("notours", notOurs, entries, l -> {}), "not a mamba4j checkpoint");
    }

    @Test
    void wrongDtypeIsRejected() throws IOException {
        // A hand-built file whose first tensor is I32: same byte size as F32, different meaning.
        Path src = savedModel();
        byte[] b = Files.readAllBytes(src);
        long n = ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN).getLong(0);
        String header = new String(b, 8, (int) n, StandardCharsets.UTF_8);
        String changed = header.replaceFirst("\"F32\"", "\"I32\"");
        byte[] out = b.clone();
        System.arraycopy(changed.getBytes(StandardCharsets.UTF_8), 0, out, 8, (int) n);
        Path f = dir.resolve("dtype.safetensors");
        Files.write(f, out);
        assertRejected(f, "dtype");
    }

    @Test
    void missingFile() {
        assertRejected(dir.resolve("nope.safetensors"), "not found");
    }

    private Path rewrite(String name, Map<String, String> meta, List<SafeTensors.Entry> entries, Consumer<List<SafeTensors.Entry>> edit) {
        List<SafeTensors.Entry> copy = new ArrayList<>();
        for (SafeTensors.Entry e : entries) copy.add(new SafeTensors.Entry(e.name(), e.shape(), e.data().clone()));
        edit.accept(copy);
        // a consistent file with the edit, so that the check under test (not the checksum) is what rejects it
        Map<String, String> m = new LinkedHashMap<>(meta);
        if (m.containsKey(CheckpointChecksum.KEY)) {
            Map<String, long[]> shapes = new LinkedHashMap<>();
            Map<String, float[]> data = new LinkedHashMap<>();
            for (SafeTensors.Entry e : copy) {
                shapes.put(e.name(), e.shape());
                data.put(e.name(), e.data());
            }
            m.put(CheckpointChecksum.KEY, CheckpointChecksum.of(m, shapes, data));
        }
        Path f = dir.resolve(name + ".safetensors");
        SafeTensors.write(f, m, copy);
        return f;
    }
}
