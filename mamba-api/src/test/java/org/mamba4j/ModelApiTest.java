package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.FloatBuffer;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The API contract: validation messages, shape checks, closed objects, devices. */
class ModelApiTest {
    @TempDir Path dir;

    @Test
    void configDefaultsMatchTheReference() {
        Mamba1Config c = Mamba1Config.defaults();
        assertEquals(128, c.dModel());
        assertEquals(16, c.dState());
        assertEquals(4, c.dConv());
        assertEquals(2, c.expand());
        assertEquals(256, c.dInner());
        assertEquals(8, c.dtRank());
        assertEquals(3, c.layers());
        assertEquals(1e-5f, c.normEps());
        assertEquals(48, Mamba1Config.builder().dModel(768).build().dtRank());
    }

    @Test
    void configValidationNamesTheFieldAndTheLimit() {
        assertMessage(() -> Mamba1Config.builder().dModel(0).build(), "dModel = 0", "[1, 65536]");
        assertMessage(() -> Mamba1Config.builder().dState(300).build(), "dState = 300", "[1, 256]");
        assertMessage(() -> Mamba1Config.builder().dConv(9).build(), "dConv = 9", "[1, 8]");
        assertMessage(() -> Mamba1Config.builder().layers(-1).build(), "layers = -1", "[1, 1024]");
        assertMessage(() -> Mamba1Config.builder().dtRank(-2).build(), "dtRank = -2", "[0, 65536]");
        assertMessage(() -> Mamba1Config.builder().dModel(40000).build(), "dInner", "65536");
        assertMessage(() -> Mamba1Config.builder().normEps(0).build(), "normEps", "(0, 1)");
        assertMessage(() -> Mamba1Config.builder().dtMin(0.5).dtMax(0.1).build(), "dtMin/dtMax", "dtMin <= dtMax");
        assertMessage(() -> MambaModel.builder(Mamba1Config.defaults()).inputDim(-1), "inputDim = -1", ">= 0");
    }

    private static void assertMessage(Runnable r, String... parts) {
        InvalidConfigException e = assertThrows(InvalidConfigException.class, r::run);
        for (String p : parts) assertTrue(e.getMessage().contains(p), "'" + e.getMessage() + "' should contain '" + p + "'");
    }

    @Test
    void aCpuModelHasNoCudaStreamAndAClosedOneRefuses() {
        MambaModel m = MambaModel.builder(Mamba1Config.defaults()).inputDim(4).device(Device.cpu()).seed(1).build();
        IllegalStateException e = assertThrows(IllegalStateException.class, m::cudaStream);
        assertTrue(e.getMessage().contains("CPU model has no CUDA stream"), e.getMessage());
        m.close();
        assertThrows(IllegalStateException.class, m::cudaStream);
    }

    @Test
    void wrongShapesThrowClearExceptions() {
        try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(16).layers(1).build()).inputDim(4).build();
             MambaState s = m.newState(2);
             MambaModel other = MambaModel.builder(Mamba1Config.builder().dModel(16).layers(1).build()).build();
             MambaState foreign = other.newState(2)) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> m.step(s, new float[7]));
            assertTrue(e.getMessage().contains("expected 8"), e.getMessage());
            assertThrows(IllegalArgumentException.class, () -> m.step(s, new float[8], new float[3]));
            assertThrows(IllegalArgumentException.class, () -> m.prefill(s, new float[8 * 3 + 1], 3));
            assertThrows(IllegalArgumentException.class, () -> m.prefill(s, new float[8], 0));
            assertThrows(IllegalArgumentException.class, () -> m.forward(s, new float[4 * 3 * 5], 3, 5));
            assertThrows(IllegalArgumentException.class, () -> m.step(foreign, new float[32]));
            assertThrows(IllegalArgumentException.class, () -> m.step(s, FloatBuffer.allocate(8), FloatBuffer.allocate(32)));
            assertThrows(IllegalArgumentException.class, () -> m.newState(0));
            assertThrows(IndexOutOfBoundsException.class, () -> s.readRow(2));
            assertThrows(IllegalArgumentException.class, () -> s.writeRow(0, new float[3]));
            assertThrows(IllegalArgumentException.class, () -> m.setParameter("backbone.norm_f.weight", new float[2]));
            assertThrows(IllegalArgumentException.class, () -> m.setParameter("nope", new float[2]));
            float[] nan = new float[16];
            nan[3] = Float.NaN;
            assertThrows(IllegalArgumentException.class, () -> m.setParameter("backbone.norm_f.weight", nan));
        }
    }

    @Test
    void copyRowFromMovesOneSequenceBetweenStates() {
        try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(16).layers(2).build()).inputDim(4).seed(3).build();
             MambaState a = m.newState(3);
             MambaState b = m.newState(2);
             MambaModel other = MambaModel.builder(Mamba1Config.builder().dModel(16).layers(2).build()).inputDim(4).build();
             MambaState foreign = other.newState(2)) {
            java.util.Random rng = new java.util.Random(5);
            for (int t = 0; t < 4; t++) m.step(a, TestUtil.random(rng, 3 * 4, 1));
            b.copyRowFrom(1, a, 2);
            assertArrayEquals(a.readRow(2), b.readRow(1), "the copied row");
            assertArrayEquals(new float[b.rowSize()], b.readRow(0), "the other row untouched");
            // the copy carries the sequence: the next step of row 2 in a and of row 1 in b agree bit for bit
            float[] xa = TestUtil.random(rng, 3 * 4, 1), xb = new float[2 * 4];
            System.arraycopy(xa, 2 * 4, xb, 4, 4);
            float[] ya = m.step(a, xa), yb = m.step(b, xb);
            assertArrayEquals(java.util.Arrays.copyOfRange(ya, 2 * 16, 3 * 16), java.util.Arrays.copyOfRange(yb, 16, 32));
            a.copyRowFrom(0, a, 1);  // within one state
            assertArrayEquals(a.readRow(1), a.readRow(0));
            float[] keep = a.readRow(1);
            a.copyRowFrom(1, a, 1);  // onto itself: nothing changes
            assertArrayEquals(keep, a.readRow(1));
            assertThrows(IllegalArgumentException.class, () -> b.copyRowFrom(0, foreign, 0));
            assertThrows(IndexOutOfBoundsException.class, () -> b.copyRowFrom(2, a, 0));
            assertThrows(IndexOutOfBoundsException.class, () -> b.copyRowFrom(0, a, 3));
            assertThrows(NullPointerException.class, () -> b.copyRowFrom(0, null, 0));
            MambaState closed = m.newState(1);
            closed.close();
            assertThrows(IllegalStateException.class, () -> b.copyRowFrom(0, closed, 0));
        }
    }

    @Test
    void useAfterCloseThrowsIllegalStateException() {
        MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(16).layers(1).build()).build();
        MambaState s = m.newState(1);
        MambaState s2 = m.newState(1);
        s.close();
        assertTrue(s.isClosed());
        assertThrows(IllegalStateException.class, () -> m.step(s, new float[16]));
        assertThrows(IllegalStateException.class, () -> s.readRow(0));
        assertThrows(IllegalStateException.class, s::reset);
        s.close();  // idempotent
        m.close();
        assertTrue(m.isClosed());
        assertThrows(IllegalStateException.class, () -> m.step(s2, new float[16]));
        assertThrows(IllegalStateException.class, () -> m.newState(1));
        assertThrows(IllegalStateException.class, () -> m.getParameter("backbone.norm_f.weight"));
        assertThrows(IllegalStateException.class, () -> m.save(dir.resolve("x.safetensors")));
        assertThrows(IllegalStateException.class, () -> m.forward(new float[16], 1, 1));
        s2.close();  // a state outlives its model safely
        m.close();
    }

    @Test
    void cpuDeviceAndCudaProbe() {
        assertTrue(Device.cpu().isCpu());
        assertEquals("cpu", Device.cpu().toString());
        int n = Device.cudaCount();
        assertTrue(n >= 0);
        if (n == 0) {
            assertFalse(Device.cudaUnavailableReason().isEmpty());
            DeviceUnavailableException e = assertThrows(DeviceUnavailableException.class, () -> Device.cuda(0));
            assertTrue(e.getMessage().startsWith("no CUDA device"), e.getMessage());
            assertEquals(Device.cpu(), Device.best());
        } else {
            assertThrows(DeviceUnavailableException.class, () -> Device.cuda(n));
            assertTrue(Device.cuda(0).totalMemory() > 0);
        }
    }

    @Test
    void parameterTableFollowsHuggingFaceNames() {
        try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(16).layers(2).build()).build()) {
            assertEquals("backbone.layers.0.norm.weight", m.parameterNames().get(0));
            assertEquals("backbone.norm_f.weight", m.parameterNames().get(m.parameterNames().size() - 1));
            assertEquals(2 + 2 * 10 - 1, m.parameterNames().size());
            long[] xp = m.parameterShape("backbone.layers.1.mixer.x_proj.weight");
            assertEquals(1 + 2 * 16, xp[0]);
            assertEquals(32, xp[1]);
        }
    }
}
