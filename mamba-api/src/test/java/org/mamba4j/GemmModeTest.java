package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * GemmMode on the CPU (GpuGemmModeTest runs the same checks on a GPU): DETERMINISTIC decode steps are
 * batch-invariant and thread-count invariant, a prefill equals its steps bit for bit, the mode stays close to a
 * double-precision reference, and training steps are bit-identical from run to run in every mode.
 */
class GemmModeTest {
    /** Batch sizes of the invariance checks (issue: B ∈ {1, 2, 3, 7, 8, 9, 13, 61, 128, 257}). */
    static final int[] BATCHES = {1, 2, 3, 7, 8, 9, 13, 61, 128, 257};
    static final int STEPS = 6, INPUT = 16;

    static MambaModel model(Device device, DType dtype, GemmMode mode) {
        return model(device, dtype, mode, 64);
    }

    static MambaModel model(Device device, DType dtype, GemmMode mode, int dModel) {
        Mamba1Config c = Mamba1Config.builder().dModel(dModel).layers(2).build();
        MambaModel m = MambaModel.builder(c).inputDim(INPUT).device(device).dtype(dtype).gemmMode(mode).seed(11).build();
        TestUtil.randomizeWeights(m, new Random(5));
        return m;
    }

    /**
     * A probe sequence stepped alone, then at a middle row of batches whose other rows hold fresh random inputs:
     * every step's output row must be bitwise the same.
     */
    static void decodeIsBatchInvariant(MambaModel m) {
        Random rng = new Random(17);
        float[][] probe = new float[STEPS][];
        for (int t = 0; t < STEPS; t++) probe[t] = TestUtil.random(rng, INPUT, 1.0);
        List<float[]> alone = run(m, probe, 1, 0, rng);
        for (int B : BATCHES) {
            int at = B / 2;
            List<float[]> got = run(m, probe, B, at, rng);
            for (int t = 0; t < STEPS; t++)
                assertArrayEquals(alone.get(t), got.get(t), "step " + t + ": row " + at + " of B = " + B + " vs B = 1");
        }
    }

    /** The probe row's output of each step, with the probe at row `at` of B rows (others random). */
    private static List<float[]> run(MambaModel m, float[][] probe, int B, int at, Random rng) {
        int D = m.outputWidth();
        List<float[]> out = new ArrayList<>();
        try (MambaState s = m.newState(B)) {
            for (float[] p : probe) {
                float[] x = TestUtil.random(rng, B * INPUT, 1.0);
                System.arraycopy(p, 0, x, at * INPUT, INPUT);
                float[] y = m.step(s, x);
                float[] row = new float[D];
                System.arraycopy(y, at * D, row, 0, D);
                out.add(row);
            }
        }
        return out;
    }

    /** Three AdamW steps twice from the same weights: identical weights after each. */
    static void trainingIsRunToRunIdentical(Device device, DType dtype, GemmMode mode) {
        float[][] after = new float[2][];
        for (int run = 0; run < 2; run++) {
            try (MambaModel m = model(device, dtype, mode);
                 Trainer t = Trainer.builder(m).batch(3).seqLen(5).adamW(AdamW.ofLearningRate(1e-2)).gemmMode(mode).build()) {
                Random rng = new Random(99);
                for (int i = 0; i < 3; i++)
                    t.stepMse(TestUtil.random(rng, 3 * 5 * INPUT, 1.0), TestUtil.random(rng, 3 * 5 * m.outputWidth(), 1.0));
                after[run] = m.getParameter("backbone.layers.1.mixer.in_proj.weight");
            }
        }
        assertArrayEquals(after[0], after[1], mode + " " + dtype + ": training run to run");
    }

    @Test
    void deterministicDecodeIsBatchInvariant() {
        try (MambaModel m = model(Device.cpu(), DType.F32, GemmMode.DETERMINISTIC)) {
            decodeIsBatchInvariant(m);
        }
    }

    @Test
    void deterministicDecodeIsThreadCountInvariant() {
        int saved = org.mamba4j.nativ.global.libmamba.cpuThreads();
        try (MambaModel m = model(Device.cpu(), DType.F32, GemmMode.DETERMINISTIC)) {
            float[][] got = new float[3][];
            for (int threads = 1; threads <= 3; threads++) {
                org.mamba4j.nativ.global.libmamba.setCpuThreads(threads);
                try (MambaState s = m.newState(64)) {
                    Random rng = new Random(3);
                    for (int t = 0; t < STEPS; t++) got[threads - 1] = m.step(s, TestUtil.random(rng, 64 * INPUT, 1.0));
                }
            }
            assertArrayEquals(got[0], got[1], "1 vs 2 threads");
            assertArrayEquals(got[0], got[2], "1 vs 3 threads");
        } finally {
            org.mamba4j.nativ.global.libmamba.setCpuThreads(saved);
        }
    }

    @Test
    void deterministicPrefillEqualsItsSteps() {
        try (MambaModel m = model(Device.cpu(), DType.F32, GemmMode.DETERMINISTIC)) {
            prefillEqualsItsSteps(m, 3);
        }
    }

    /** A prefill of `rows` rows × 9 tokens and 9 steps of the same rows: the same last outputs and states, bit for bit. */
    static void prefillEqualsItsSteps(MambaModel m, int rows) {
        try (MambaState a = m.newState(rows);
             MambaState b = m.newState(rows)) {
            Random rng = new Random(23);
            int T = 9;
            float[] x = TestUtil.random(rng, rows * T * INPUT, 1.0);
            float[] last = m.prefill(a, x, T);
            float[] y = null;
            for (int t = 0; t < T; t++) {
                float[] xt = new float[rows * INPUT];
                for (int r = 0; r < rows; r++) System.arraycopy(x, (r * T + t) * INPUT, xt, r * INPUT, INPUT);
                y = m.step(b, xt);
            }
            assertArrayEquals(y, last, "prefill(T) vs T steps");
            assertArrayEquals(b.readRow(rows - 1), a.readRow(rows - 1), "states");
        }
    }

    @Test
    void deterministicStaysCloseToTheDoubleReference() {
        try (MambaModel m = model(Device.cpu(), DType.F32, GemmMode.DETERMINISTIC); MambaState s = m.newState(4)) {
            Mamba1Reference ref = new Mamba1Reference(m, 4);
            Random rng = new Random(8);
            for (int t = 0; t < 12; t++) {
                float[] x = TestUtil.random(rng, 4 * INPUT, 1.0);
                double rel = TestUtil.relL2(m.step(s, x), ref.step(x));
                assertTrue(rel < 1e-5, "step " + t + ": rel L2 " + rel);
            }
        }
    }

    @Test
    void trainingIsRunToRunIdenticalInEveryMode() {
        for (GemmMode mode : GemmMode.values()) trainingIsRunToRunIdentical(Device.cpu(), DType.F32, mode);
    }

    @Test
    void theModeIsKeptAndChangeable() {
        try (MambaModel m = model(Device.cpu(), DType.F32, GemmMode.CUBLAS_PEDANTIC)) {
            assertEquals(GemmMode.CUBLAS_PEDANTIC, m.gemmMode());
            m.setGemmMode(GemmMode.DETERMINISTIC);
            assertEquals(GemmMode.DETERMINISTIC, m.gemmMode());
        }
        try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(16).layers(1).build()).build()) {
            assertEquals(GemmMode.CUBLAS_FAST, m.gemmMode(), "default");
        }
    }
}
