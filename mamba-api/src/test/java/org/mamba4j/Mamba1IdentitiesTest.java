package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.util.Arrays;
import java.util.Random;
import org.junit.jupiter.api.Test;

/** Identities between the inference entry points: prefill vs steps, chunking, batching, state rows. */
class Mamba1IdentitiesTest {
    private static final long SEED = System.nanoTime();
    private static final int IN = 5, B = 3;

    private static MambaModel model(Random rng) {
        MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(48).layers(2).dConv(4).build())
                .inputDim(IN).seed(rng.nextLong()).build();
        TestUtil.randomizeWeights(m, rng);
        return m;
    }

    /** x [B, T, IN] → the slice of time t as [B, IN]. */
    private static float[] at(float[] x, int T, int t) {
        float[] out = new float[B * IN];
        for (int b = 0; b < B; b++) System.arraycopy(x, (b * T + t) * IN, out, b * IN, IN);
        return out;
    }

    @Test
    void prefillEqualsStepsAndStepsContinueFromIt() {
        Random rng = new Random(SEED);
        int T = 37;
        try (MambaModel m = model(rng); MambaState a = m.newState(B); MambaState s = m.newState(B)) {
            float[] x = TestUtil.random(rng, B * T * IN, 1);
            float[] last = m.prefill(a, x, T);
            float[] y = null;
            for (int t = 0; t < T; t++) y = m.step(s, at(x, T, t));
            assertTrue(TestUtil.relL2(last, y) < 1e-5, "seed " + SEED + ": prefill vs steps " + TestUtil.relL2(last, y));
            float[] next = TestUtil.random(rng, B * IN, 1);
            float[] fromPrefill = m.step(a, next), fromSteps = m.step(s, next);
            assertTrue(TestUtil.relL2(fromPrefill, fromSteps) < 1e-5, "seed " + SEED + ": handoff");
        }
    }

    @Test
    void prefillInTwoChunksEqualsOnePrefill() {
        Random rng = new Random(SEED + 1);
        int T1 = 11, T2 = 2;  // the second chunk is shorter than the conv window
        try (MambaModel m = model(rng); MambaState one = m.newState(B); MambaState two = m.newState(B)) {
            float[] x = TestUtil.random(rng, B * (T1 + T2) * IN, 1);
            float[] whole = m.prefill(one, x, T1 + T2);
            float[] x1 = new float[B * T1 * IN], x2 = new float[B * T2 * IN];
            for (int b = 0; b < B; b++) {
                System.arraycopy(x, b * (T1 + T2) * IN, x1, b * T1 * IN, T1 * IN);
                System.arraycopy(x, (b * (T1 + T2) + T1) * IN, x2, b * T2 * IN, T2 * IN);
            }
            m.prefill(two, x1, T1);
            float[] split = m.prefill(two, x2, T2);
            assertTrue(TestUtil.relL2(split, whole) < 1e-5, "seed " + SEED);
            for (int b = 0; b < B; b++)
                assertTrue(TestUtil.relL2(two.readRow(b), one.readRow(b)) < 1e-5, "state row " + b);
        }
    }

    @Test
    void forwardReturnsEveryPositionOfPrefill() {
        Random rng = new Random(SEED + 2);
        int T = 9;
        try (MambaModel m = model(rng); MambaState s = m.newState(B)) {
            float[] x = TestUtil.random(rng, B * T * IN, 1);
            float[] all = m.forward(x, B, T);
            assertEquals(B * T * 48, all.length);
            for (int t = 0; t < T; t++) {
                float[] y = m.step(s, at(x, T, t));
                for (int b = 0; b < B; b++) {
                    float[] got = Arrays.copyOfRange(all, (b * T + t) * 48, (b * T + t + 1) * 48);
                    float[] want = Arrays.copyOfRange(y, b * 48, (b + 1) * 48);
                    assertTrue(TestUtil.relL2(got, want) < 1e-5, "b " + b + " t " + t);
                }
            }
        }
    }

    @Test
    void batchRowsAreIndependent() {
        Random rng = new Random(SEED + 3);
        try (MambaModel m = model(rng); MambaState batch = m.newState(B)) {
            MambaState[] single = new MambaState[B];
            for (int b = 0; b < B; b++) single[b] = m.newState(1);
            for (int t = 0; t < 20; t++) {
                float[] x = TestUtil.random(rng, B * IN, 1);
                float[] y = m.step(batch, x);
                for (int b = 0; b < B; b++) {
                    float[] yb = m.step(single[b], Arrays.copyOfRange(x, b * IN, (b + 1) * IN));
                    // Same math, but B rows go through sgemm and one row through sgemv: equal to f32 rounding.
                    double err = TestUtil.relL2(Arrays.copyOfRange(y, b * 48, (b + 1) * 48), yb);
                    assertTrue(err < 1e-6, "row " + b + " t " + t + ": rel L2 " + err);
                }
            }
            for (MambaState s : single) s.close();
        }
    }

    @Test
    void stateRowsCanBeParkedAndRestored() {
        Random rng = new Random(SEED + 4);
        try (MambaModel m = model(rng); MambaState s = m.newState(B); MambaState other = m.newState(B)) {
            for (int t = 0; t < 5; t++) m.step(s, TestUtil.random(rng, B * IN, 1));
            float[] parked = s.readRow(1);
            assertEquals(s.rowSize(), parked.length);
            other.writeRow(2, parked);
            float[] x = TestUtil.random(rng, B * IN, 1);
            float[] x2 = new float[B * IN];
            System.arraycopy(x, IN, x2, 2 * IN, IN);  // row 1's input goes to row 2 of the other state
            float[] y = m.step(s, x), y2 = m.step(other, x2);
            assertArrayEquals(Arrays.copyOfRange(y, 48, 96), Arrays.copyOfRange(y2, 96, 144), 0f);
            s.resetRow(0);
            assertTrue(allZero(s.readRow(0)));
            assertNotEquals(0f, norm(s.readRow(1)));
            s.reset();
            for (int b = 0; b < B; b++) assertTrue(allZero(s.readRow(b)));
        }
    }

    @Test
    void resetStateReproducesOutputs() {
        Random rng = new Random(SEED + 5);
        try (MambaModel m = model(rng); MambaState s = m.newState(B)) {
            float[] x = TestUtil.random(rng, B * 6 * IN, 1);
            float[] first = m.prefill(s, x, 6);
            s.reset();
            assertArrayEquals(first, m.prefill(s, x, 6), 0f);
        }
    }

    @Test
    void directBuffersMatchArraysAndHonourPosition() {
        Random rng = new Random(SEED + 6);
        try (MambaModel m = model(rng); MambaState a = m.newState(B); MambaState b = m.newState(B)) {
            float[] x = TestUtil.random(rng, B * IN, 1);
            float[] want = m.step(a, x);
            FloatBuffer xb = direct(3 + x.length), yb = direct(2 + want.length);
            xb.position(3);
            xb.put(x).position(3);
            yb.position(2);
            m.step(b, xb, yb);
            float[] got = new float[want.length];
            yb.get(2, got);
            assertArrayEquals(want, got, 0f);
            assertEquals(3, xb.position());
        }
    }

    @Test
    void sameSeedSameWeights() {
        Mamba1Config c = Mamba1Config.builder().dModel(32).layers(2).build();
        try (MambaModel a = MambaModel.builder(c).inputDim(4).seed(7).build();
             MambaModel b = MambaModel.builder(c).inputDim(4).seed(7).build();
             MambaModel d = MambaModel.builder(c).inputDim(4).seed(8).build()) {
            for (String name : a.parameterNames()) assertArrayEquals(a.getParameter(name), b.getParameter(name), 0f, name);
            String w = "backbone.layers.1.mixer.in_proj.weight";
            assertTrue(TestUtil.relL2(a.getParameter(w), d.getParameter(w)) > 0.5);
            // Paper initialisation facts: A_log = ln(n+1), D = 1, in_proj bound 1/sqrt(d_model).
            float[] aLog = a.getParameter("backbone.layers.0.mixer.A_log");
            assertEquals(Math.log(3), aLog[2], 1e-6);
            assertEquals(1f, a.getParameter("backbone.layers.0.mixer.D")[5]);
            float max = 0;
            for (float v : a.getParameter(w)) max = Math.max(max, Math.abs(v));
            assertTrue(max <= 1 / Math.sqrt(32) && max > 0.9 / Math.sqrt(32), "in_proj bound " + max);
        }
    }

    private static FloatBuffer direct(int n) {
        return ByteBuffer.allocateDirect(n * 4).order(ByteOrder.nativeOrder()).asFloatBuffer();
    }

    private static boolean allZero(float[] v) {
        for (float f : v) if (f != 0) return false;
        return true;
    }

    private static float norm(float[] v) {
        float s = 0;
        for (float f : v) s += f * f;
        return s;
    }
}
