package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.Test;

/**
 * Logits of many rows go through the model's reusable native buffers (HostStaging) instead of JNI array copies.
 * With a vocabulary of 40,000 one row (40,000 floats) takes the plain array path and two rows (80,000 ≥
 * HostStaging.MIN_FLOATS) the staged one; in DETERMINISTIC mode a row's logits do not depend on the batch, so
 * the two paths must agree bit for bit — for stepTokens, prefillTokens and forwardTokens, on several threads at
 * once, and after the buffers were grown by a bigger call.
 */
class HostStagingTest {
    private static final int V = 40_000;

    private static MambaModel lm() {
        Mamba1Config c = Mamba1Config.builder().dModel(16).dState(4).layers(1).build();
        return MambaModel.builder(c).vocabSize(V).device(Device.cpu()).gemmMode(GemmMode.DETERMINISTIC).seed(7).build();
    }

    private static float[] row(float[] all, int r, int width) {
        float[] out = new float[width];
        System.arraycopy(all, r * width, out, 0, width);
        return out;
    }

    @Test
    void stagedLogitsEqualThePlainArrayPath() {
        assertTrue(2L * V >= HostStaging.MIN_FLOATS && V < HostStaging.MIN_FLOATS, "the test must straddle the bound");
        try (MambaModel m = lm(); MambaState two = m.newState(2); MambaState a = m.newState(1); MambaState b = m.newState(1)) {
            Random rng = new Random(3);
            for (int step = 0; step < 3; step++) {
                int[] ids = {rng.nextInt(V), rng.nextInt(V)};
                float[] both = new float[2 * V], la = new float[V], lb = new float[V];
                m.stepTokens(two, ids, both);
                m.stepTokens(a, new int[] {ids[0]}, la);
                m.stepTokens(b, new int[] {ids[1]}, lb);
                assertArrayEquals(la, row(both, 0, V), "row 0, step " + step);
                assertArrayEquals(lb, row(both, 1, V), "row 1, step " + step);
            }
            // prefill of 5 tokens per row, then every position's logits of the same prompts from a zero state
            int[] prompt = new int[10];
            for (int i = 0; i < prompt.length; i++) prompt[i] = rng.nextInt(V);
            float[] last = new float[2 * V];
            try (MambaState p = m.newState(2)) {
                m.prefillTokens(p, prompt, 5, last);
            }
            float[] every = m.forwardTokens(null, prompt, 2, 5);  // 10 positions × V: staged
            for (int r = 0; r < 2; r++) {
                float[] alone = new float[V];
                try (MambaState s = m.newState(1)) {
                    m.prefillTokens(s, java.util.Arrays.copyOfRange(prompt, 5 * r, 5 * r + 5), 5, alone);
                }
                assertArrayEquals(alone, row(last, r, V), "prefill row " + r);
                assertArrayEquals(alone, row(every, 5 * r + 4, V), "forwardTokens row " + r + ", last position");
            }
        }
    }

    @Test
    void stagedSequenceOutputsMatchRowByRowRuns() {
        Mamba1Config c = Mamba1Config.builder().dModel(16).dState(4).layers(1).build();
        int T = 2048, in = 3;  // 2 rows × 2048 steps × 16 = 65,536 outputs: staged; one row: plain arrays
        try (MambaModel m = MambaModel.builder(c).inputDim(in).device(Device.cpu()).gemmMode(GemmMode.DETERMINISTIC)
                .seed(2).build()) {
            float[] x = TestUtil.random(new Random(9), 2 * T * in, 1);
            float[] both = m.forward(x, 2, T);
            for (int r = 0; r < 2; r++) {
                float[] alone = m.forward(java.util.Arrays.copyOfRange(x, r * T * in, (r + 1) * T * in), 1, T);
                assertArrayEquals(alone, java.util.Arrays.copyOfRange(both, r * T * 16, (r + 1) * T * 16), "row " + r);
            }
            // the trainer's forward takes the model's buffers too; its products may round differently from
            // inference's, so it is held to f32 rounding of the inference output
            try (Trainer t = Trainer.builder(m).batch(2).seqLen(T).build()) {
                float[] y = t.forward(x);
                assertTrue(TestUtil.relL2(y, both) < 1e-5, "trainer forward vs inference: rel L2 " + TestUtil.relL2(y, both));
            }
        }
        try (MambaModel lm = lm(); Trainer t = Trainer.builder(lm).batch(2).seqLen(3).build()) {
            int[] ids = {5, 17, 39_999, 0, 123, 7};
            float[] logits = t.forwardTokens(ids);  // 6 × 40,000: staged
            float[] want = lm.forwardTokens(null, ids, 2, 3);
            assertTrue(TestUtil.relL2(logits, want) < 1e-5, "trainer logits vs inference: rel L2 " + TestUtil.relL2(logits, want));
        }
    }

    @Test
    void concurrentCallsOnOneModelGetTheirOwnBuffers() throws Exception {
        try (MambaModel m = lm()) {
            int threads = 6;
            List<int[]> inputs = new ArrayList<>();
            Random rng = new Random(5);
            for (int t = 0; t < threads; t++) inputs.add(new int[] {rng.nextInt(V), rng.nextInt(V), rng.nextInt(V)});
            List<float[]> want = new ArrayList<>();
            for (int[] ids : inputs) {
                try (MambaState s = m.newState(3)) {
                    float[] l = new float[3 * V];
                    m.stepTokens(s, ids, l);
                    want.add(l);
                }
            }
            ExecutorService pool = Executors.newFixedThreadPool(threads);
            try {
                List<Future<float[]>> got = new ArrayList<>();
                for (int[] ids : inputs)
                    got.add(pool.submit(() -> {
                        float[] l = new float[3 * V];
                        for (int k = 0; k < 5; k++) {
                            try (MambaState s = m.newState(3)) {
                                m.stepTokens(s, ids, l);
                            }
                        }
                        return l;
                    }));
                for (int t = 0; t < threads; t++) assertArrayEquals(want.get(t), got.get(t).get(), "thread " + t);
            } finally {
                pool.shutdown();
            }
        }
    }

    @Test
    void wrongLengthsAndClosedModelsAreStillRefused() {
        MambaModel m = lm();
        MambaState s = m.newState(2);
        assertThrows(IllegalArgumentException.class, () -> m.stepTokens(s, new int[] {1, 2}, new float[2 * V - 1]));
        assertThrows(IllegalArgumentException.class, () -> m.stepTokens(s, new int[] {1, V}, new float[2 * V]));
        s.close();
        m.close();
        assertThrows(IllegalStateException.class, () -> m.stepTokens(s, new int[] {1, 2}, new float[2 * V]));
    }
}
