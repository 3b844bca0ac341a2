package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.mamba4j.nativ.global.libmamba;

/** Bit-identity of training results: split vs fused, run vs run, 1 vs 2 threads; accumulation vs full batch. */
class TrainerDeterminismTest {
    // d_inner 128 = two channel blocks, T 80 > one scan chunk: every parallel path of the CPU backward runs.
    private static final Mamba1Config CONFIG = Mamba1Config.builder().dModel(64).dState(8).layers(2).build();
    private static final int IN = 6, B = 4, T = 80, V = 7;
    private int threadsBefore;

    @BeforeEach
    void rememberThreads() {
        threadsBefore = libmamba.cpuThreads();
    }

    @AfterEach
    void restoreThreads() {
        libmamba.setCpuThreads(threadsBefore);
    }

    private static MambaModel model() {
        return MambaModel.builder(CONFIG).inputDim(IN).seed(11).build();
    }

    private static Trainer.Builder trainer(MambaModel m) {
        return Trainer.builder(m).batch(B).seqLen(T).adamW(AdamW.ofLearningRate(3e-3).weightDecay(0.1)).clipGradNorm(0.5)
                .crossEntropyHead(V).headSeed(3);
    }

    /** Batch k of a fixed data stream: inputs, output gradients and targets. */
    private static float[] inputs(int k) {
        return TestUtil.random(new Random(1000 + k), B * T * IN, 1);
    }

    private static float[] dOut(int k) {
        return TestUtil.random(new Random(2000 + k), B * T * CONFIG.dModel(), 0.01);
    }

    private static int[] targets(int k) {
        Random r = new Random(3000 + k);
        int[] t = new int[B * T];
        for (int i = 0; i < t.length; i++) t[i] = i % 5 == 0 ? Trainer.DEFAULT_IGNORE_INDEX : r.nextInt(V);
        return t;
    }

    /** Every trainable tensor (model and head), the last input gradient, and the step results, as one list. */
    private static List<float[]> everything(Trainer t, List<StepResult> results) {
        List<float[]> out = new ArrayList<>();
        for (String n : t.model().parameterNames()) out.add(t.model().getParameter(n));
        out.add(t.head().weight());
        out.add(t.head().bias());
        out.add(t.inputGradient());
        float[] r = new float[results.size() * 3];
        for (int i = 0; i < results.size(); i++) {
            r[3 * i] = (float) results.get(i).loss();
            r[3 * i + 1] = (float) results.get(i).gradNorm();
            r[3 * i + 2] = (float) results.get(i).accuracy();
        }
        out.add(r);
        return out;
    }

    /** Three steps mixing the paths: a fused step, a cross-entropy step, a split step. */
    private static List<float[]> run(int threads) {
        try (MambaModel m = model(); Trainer t = trainer(m).threads(threads).build()) {
            List<StepResult> rs = new ArrayList<>();
            rs.add(t.step(inputs(0), dOut(0)));
            rs.add(t.stepCrossEntropy(inputs(1), targets(1)));
            t.forward(inputs(2));
            rs.add(t.backward(dOut(2)));
            rs.add(t.stepCrossEntropy(inputs(3), targets(3)));
            return everything(t, rs);
        }
    }

    private static void assertBitIdentical(List<float[]> a, List<float[]> b, String what) {
        assertEquals(a.size(), b.size());
        for (int i = 0; i < a.size(); i++) assertArrayEquals(a.get(i), b.get(i), what + ": item " + i + " differs");
    }

    /**
     * The training forward equals the inference forward to f32 rounding: the same stages, but its products run
     * on fixed tiles (reproducible for any thread count) while inference lets OpenBLAS split them.
     */
    @Test
    void trainingForwardEqualsInferenceForward() {
        try (MambaModel m = model(); Trainer t = Trainer.builder(m).batch(B).seqLen(T).build()) {
            float[] x = inputs(0);
            assertTrue(TestUtil.relL2(t.forward(x), m.forward(x, B, T)) < 1e-6);
            // and from a burn-in state: equal to the model's forward carrying a state through the prefix
            float[] prefix = inputs(1);
            try (MambaState s = m.newState(B)) {
                float[] pre = new float[B * 3 * IN];
                System.arraycopy(prefix, 0, pre, 0, pre.length);
                m.forward(s, pre, B, 3);
                t.burnIn(pre, 3);
                assertTrue(TestUtil.relL2(t.forward(x), m.forward(s, x, B, T)) < 1e-6);
                try (MambaState end = m.newState(B)) {
                    t.readEndState(end);
                    for (int b = 0; b < B; b++)
                        assertTrue(TestUtil.relL2(end.readRow(b), s.readRow(b)) < 1e-6, "end state row " + b);
                }
            }
        }
    }

    @Test
    void twoRunsAreBitIdentical() {
        assertBitIdentical(run(2), run(2), "run vs run");
    }

    @Test
    void oneTwoAndThreeThreadsAreBitIdentical() {
        List<float[]> one = run(1);
        assertBitIdentical(one, run(2), "1 vs 2 threads");
        assertBitIdentical(one, run(3), "1 vs 3 threads");
    }

    @Test
    void splitEqualsFusedBitForBit() {
        try (MambaModel m1 = model(); MambaModel m2 = model(); Trainer fused = trainer(m1).build(); Trainer split = trainer(m2).build()) {
            List<StepResult> r1 = new ArrayList<>(), r2 = new ArrayList<>();
            for (int k = 0; k < 3; k++) {
                r1.add(fused.step(inputs(k), dOut(k)));
                split.forward(inputs(k));
                r2.add(split.backward(dOut(k)));
            }
            assertBitIdentical(everything(fused, r1), everything(split, r2), "split vs fused");
        }
    }

    /** Two half batches accumulated (sum of gradients) equal one full batch, up to reduction order. */
    @Test
    void twoHalfBatchAccumulationsEqualOneFullBatch() {
        float[] x = inputs(5), p = dOut(5);
        int[] tg = targets(5);
        int half = B / 2, xh = half * T * IN, ph = half * T * CONFIG.dModel(), th = half * T;
        try (MambaModel m1 = model(); MambaModel m2 = model();
             Trainer full = trainer(m1).build();
             Trainer halves = Trainer.builder(m2).batch(half).seqLen(T).crossEntropyHead(V).headSeed(3).build()) {
            full.step(x, p, BackwardOptions.accumulate());
            halves.step(slice(x, 0, xh), slice(p, 0, ph), BackwardOptions.accumulate());
            halves.step(slice(x, xh, xh), slice(p, ph, ph), BackwardOptions.accumulate());
            for (String n : m1.parameterNames()) {
                double err = TestUtil.relL2(halves.gradient(n), full.gradient(n));
                assertTrue(err < 1e-5, n + ": " + err);
            }
            // Cross-entropy is a mean per micro-batch: two halves with scale 1/2 each give the full-batch mean
            // only when both halves count as many positions, which these targets do (every 5th ignored).
            full.zeroGrad();
            halves.zeroGrad();
            StepResult f = full.stepCrossEntropy(x, tg, BackwardOptions.accumulate());
            StepResult h1 = halves.stepCrossEntropy(slice(x, 0, xh), slice(tg, 0, th), BackwardOptions.accumulate().scale(0.5));
            StepResult h2 = halves.stepCrossEntropy(slice(x, xh, xh), slice(tg, th, th), BackwardOptions.accumulate().scale(0.5));
            assertEquals(h1.counted(), h2.counted());
            assertEquals(f.loss(), (h1.loss() + h2.loss()) / 2, 1e-5 * f.loss());
            for (String n : full.parameterNames()) {
                double err = TestUtil.relL2(halves.gradient(n), full.gradient(n));
                assertTrue(err < 1e-5, n + ": " + err);
            }
            // The optimizer sees the same gradient norm. (The weights after AdamW's first step are not compared:
            // m̂/√v̂ = sign(g) amplifies rounding differences of near-zero gradient elements.)
            StepResult a = full.optimizerStep(), b = halves.optimizerStep();
            assertEquals(a.gradNorm(), b.gradNorm(), 1e-5 * a.gradNorm());
        }
    }

    private static float[] slice(float[] a, int from, int n) {
        float[] out = new float[n];
        System.arraycopy(a, from, out, 0, n);
        return out;
    }

    private static int[] slice(int[] a, int from, int n) {
        int[] out = new int[n];
        System.arraycopy(a, from, out, 0, n);
        return out;
    }
}
