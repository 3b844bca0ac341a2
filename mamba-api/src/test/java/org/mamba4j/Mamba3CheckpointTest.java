package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.mamba4j.io.SafeTensors;
import org.mamba4j.io.SafeTensorsFile;
import org.mamba4j.io.TensorInfo;

/** mamba4j's own checkpoint format with Mamba-3 SISO models: the metadata's config picks Mamba3Config, tensors match. */
class Mamba3CheckpointTest {
    @TempDir Path dir;

    private static final Mamba3Config SMALL = Mamba3Config.builder().dModel(32).layers(2).dState(16).headdim(16).build();
    /** Every field away from its default. */
    private static final Mamba3Config ODD = Mamba3Config.builder().dModel(24).layers(3).dState(8).expand(4).headdim(8).ngroups(3)
            .chunkSize(16).ropeFraction(1.0).aFloor(0.0625).outprojNorm(true).normEps(1e-6).dtMin(0.002).dtMax(0.05)
            .dtInitFloor(0.001).build();

    private static void randomize(MambaModel m, long seed) {
        Random rng = new Random(seed);
        for (String name : m.parameterNames()) {
            float[] v = m.getParameter(name);
            for (int i = 0; i < v.length; i++) v[i] = (float) (0.3 * rng.nextGaussian());
            m.setParameter(name, v);
        }
    }

    private static void assertSameWeights(MambaModel a, MambaModel b) {
        assertEquals(a.parameterNames(), b.parameterNames());
        for (String n : a.parameterNames()) {
            assertArrayEquals(a.parameterShape(n), b.parameterShape(n), n);
            float[] x = a.getParameter(n), y = b.getParameter(n);
            for (int i = 0; i < x.length; i++)
                assertEquals(Float.floatToRawIntBits(x[i]), Float.floatToRawIntBits(y[i]), n + "[" + i + "]");
        }
    }

    /** Language models (tied, untied) and float-input backbones round-trip their config and every weight bit for bit. */
    @Test
    void saveLoadRoundTripsEveryKind() {
        List<MambaModel.Builder> kinds = List.of(MambaModel.builder(SMALL).vocabSize(40), MambaModel.builder(ODD).vocabSize(40)
                .tieEmbeddings(false), MambaModel.builder(SMALL).inputDim(5), MambaModel.builder(ODD));
        int i = 0;
        for (MambaModel.Builder kind : kinds) {
            Path f = dir.resolve("m" + i + ".safetensors");
            try (MambaModel a = kind.seed(i).build()) {
                randomize(a, i++);
                a.save(f);
                try (MambaModel b = MambaModel.load(f)) {
                    assertInstanceOf(Mamba3Config.class, b.config());
                    assertEquals(a.config(), b.config());
                    assertEquals("mamba3", b.config().arch());
                    assertEquals(a.inputDim(), b.inputDim());
                    assertEquals(a.vocabSize(), b.vocabSize());
                    assertEquals(a.tieEmbeddings(), b.tieEmbeddings());
                    assertSameWeights(a, b);
                }
            }
        }
    }

    /** The metadata carries every Mamba3Config field under the official argument names. */
    @Test
    void metadataHoldsTheConfig() throws Exception {
        Path f = dir.resolve("meta.safetensors");
        try (MambaModel a = MambaModel.builder(ODD).vocabSize(16).build()) {
            a.save(f);
        }
        try (SafeTensorsFile st = SafeTensorsFile.open(f)) {
            assertEquals("mamba3", st.metadata().get("arch"));
            JsonNode c = new ObjectMapper().readTree(st.metadata().get("config"));
            assertEquals(8, c.get("headdim").intValue());
            assertEquals(3, c.get("ngroups").intValue());
            assertEquals(1.0, c.get("rope_fraction").doubleValue());
            assertTrue(c.get("is_outproj_norm").booleanValue());
            assertEquals(16, c.get("chunk_size").intValue());
            // the official [nheads, 1, d_state] bias shape and the gate norm of is_outproj_norm
            assertArrayEquals(new long[] {12, 1, 8}, st.get("backbone.layers.2.mixer.C_bias").shape());
            assertArrayEquals(new long[] {96}, st.get("backbone.layers.0.mixer.norm.weight").shape());
            assertArrayEquals(new long[] {2 * 96 + 2 * 3 * 8 + 3 * 12 + 4, 24}, st.get("backbone.layers.1.mixer.in_proj.weight").shape());
        }
    }

    /** loadWeights into a Mamba-3 model of the same shape works; into another shape or architecture it fails, changing nothing. */
    @Test
    void loadWeightsChecksTheArchitecture() {
        Path m3 = dir.resolve("m3.safetensors"), m1 = dir.resolve("m1.safetensors");
        try (MambaModel a = MambaModel.builder(SMALL).vocabSize(16).seed(1).build();
             MambaModel b = MambaModel.builder(SMALL).vocabSize(16).seed(2).build();
             MambaModel other = MambaModel.builder(Mamba1Config.builder().dModel(32).layers(2).build()).vocabSize(16).build()) {
            randomize(a, 3);
            a.save(m3);
            other.save(m1);
            float[] before = b.getParameter("backbone.layers.0.mixer.B_bias");
            CheckpointException e = assertThrows(CheckpointException.class, () -> b.loadWeights(m1));
            assertTrue(e.getMessage().contains("another shape"), e.getMessage());
            assertArrayEquals(before, b.getParameter("backbone.layers.0.mixer.B_bias"));
            assertThrows(CheckpointException.class, () -> other.loadWeights(m3));
            b.loadWeights(m3);
            assertSameWeights(a, b);
        }
    }

    /** Corrupt Mamba-3 metadata and tensors are rejected by name. */
    @Test
    void corruptFilesAreRejected() {
        Path src = dir.resolve("src.safetensors");
        try (MambaModel a = MambaModel.builder(SMALL).vocabSize(16).build()) {
            a.save(src);
        }
        Map<String, String> meta;
        List<SafeTensors.Entry> entries = new ArrayList<>();
        try (SafeTensorsFile st = SafeTensorsFile.open(src)) {
            meta = new LinkedHashMap<>(st.metadata());
            for (TensorInfo t : st.tensors()) entries.add(new SafeTensors.Entry(t.name(), t.shape(), st.readFloats(t.name())));
        }
        Map<String, String> noHeaddim = new LinkedHashMap<>(meta);
        noHeaddim.put("config", meta.get("config").replace("\"headdim\":16,", ""));
        assertRejected(write("nohd", noHeaddim, entries), "headdim");
        Map<String, String> badRope = new LinkedHashMap<>(meta);
        badRope.put("config", meta.get("config").replace("\"rope_fraction\":0.5", "\"rope_fraction\":0.7"));
        assertRejected(write("rope", badRope, entries), "ropeFraction");
        Map<String, String> badDiv = new LinkedHashMap<>(meta);
        badDiv.put("config", meta.get("config").replace("\"headdim\":16", "\"headdim\":24"));
        assertRejected(write("div", badDiv, entries), "headdim");
        List<SafeTensors.Entry> flat = new ArrayList<>(entries);
        for (int i = 0; i < flat.size(); i++)
            if (flat.get(i).name().equals("backbone.layers.0.mixer.B_bias"))
                flat.set(i, new SafeTensors.Entry(flat.get(i).name(), new long[] {4, 16}, flat.get(i).data()));
        Map<String, String> unchecked = new LinkedHashMap<>(meta);
        unchecked.remove(CheckpointChecksum.KEY);
        unchecked.put("format_version", Checkpoints.FORMAT_VERSION_1);
        assertRejected(write("flat", unchecked, flat), "'backbone.layers.0.mixer.B_bias' has shape [4, 16]");
    }

    private Path write(String name, Map<String, String> meta, List<SafeTensors.Entry> entries) {
        Path f = dir.resolve(name + ".safetensors");
        SafeTensors.write(f, meta, entries);
        return f;
    }

    private static void assertRejected(Path f, String fragment) {
        CheckpointException e = assertThrows(CheckpointException.class, () -> MambaModel.load(f));
        assertTrue(e.getMessage().contains(fragment), "'" + fragment + "' not in: " + e.getMessage());
    }

    /** A loaded Mamba-3 model computes exactly what the saved one does (needs the Mamba-3 forward kernels). */
    @Test
    void loadedModelComputesTheSameOutputs() {
        Path f = dir.resolve("fwd.safetensors");
        Random rng = new Random(5);
        try (MambaModel a = MambaModel.builder(SMALL).inputDim(6).seed(4).build()) {
            randomize(a, 6);
            a.save(f);
            try (MambaModel b = MambaModel.load(f)) {
                float[] x = TestUtil.random(rng, 2 * 9 * 6, 1);
                float[] ya = a.forward(x, 2, 9), yb = b.forward(x, 2, 9);
                assertEquals(2 * 9 * 32, yb.length);
                for (int i = 0; i < ya.length; i++) {
                    assertTrue(Float.isFinite(yb[i]), "y[" + i + "]");
                    assertEquals(Float.floatToRawIntBits(ya[i]), Float.floatToRawIntBits(yb[i]), "y[" + i + "]");
                }
                double largest = 0;
                for (float v : yb) largest = Math.max(largest, Math.abs(v));
                assertTrue(largest > 1e-3, "the outputs are not all zero: " + largest);
            }
        }
    }
}
