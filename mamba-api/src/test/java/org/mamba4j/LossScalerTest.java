package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * The dynamic loss scaler's state machine on the CPU ({@link LossScaler}): with power-of-two scales a scaled step
 * gives the unscaled step's bits (weights, moments, losses, gradient norms); the scale grows after growthInterval
 * applied steps and backs off on an overflow, which is skipped with weights, moments and step count unchanged; the
 * start-state gradient comes back unscaled.
 */
class LossScalerTest {
    private static final int D = 8, IN = 3, B = 2, T = 6, V = 5;

    private static MambaModel model(long seed) {
        MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(D).dState(4).layers(2).build()).inputDim(IN)
                .seed(seed).build();
        TestUtil.randomizeWeights(m, new Random(seed));
        return m;
    }

    private static Trainer.Builder trainer(MambaModel m) {
        return Trainer.builder(m).batch(B).seqLen(T).clipGradNorm(0.5).crossEntropyHead(V).headSeed(3)
                .adamW(AdamW.ofLearningRate(1e-2).weightDecay(0.1));
    }

    private static float[] weights(MambaModel m, Trainer t) {
        java.util.List<float[]> parts = new java.util.ArrayList<>();
        for (String n : m.parameterNames()) parts.add(m.getParameter(n));
        parts.add(t.head().weight());
        parts.add(t.head().bias());
        OptimizerState o = t.exportOptimizerState();
        for (String n : t.parameterNames()) {
            parts.add(o.firstMoment(n));
            parts.add(o.secondMoment(n));
        }
        return TestUtil.concat(parts);
    }

    /** MSE, cross-entropy and split steps with and without a 2^16 scaler: the same bits everywhere. */
    @Test
    void aScaledStepGivesTheBitsOfTheUnscaledOne() {
        try (MambaModel a = model(5); MambaModel b = model(5); Trainer plain = trainer(a).build();
             Trainer scaled = trainer(b).lossScaler(LossScaler.dynamic()).build()) {
            assertEquals(65536.0, scaled.lossScale());
            assertEquals(1.0, plain.lossScale());
            Random rng = new Random(11);
            for (int s = 0; s < 6; s++) {
                float[] x = TestUtil.random(rng, B * T * IN, 1);
                float[] y = TestUtil.random(rng, B * T * D, 1);
                int[] c = new int[B * T];
                for (int i = 0; i < c.length; i++) c[i] = rng.nextInt(V);
                StepResult p, q;
                if (s % 3 == 0) {
                    p = plain.stepMse(x, y);
                    q = scaled.stepMse(x, y);
                } else if (s % 3 == 1) {
                    p = plain.stepCrossEntropy(x, c);
                    q = scaled.stepCrossEntropy(x, c);
                } else {  // two accumulated micro-batches, the second through the split calls
                    plain.stepMse(x, y, BackwardOptions.accumulate());
                    scaled.stepMse(x, y, BackwardOptions.accumulate());
                    plain.forward(x);
                    scaled.forward(x);
                    p = plain.backward(y);
                    q = scaled.backward(y);
                }
                assertTrue(p.optimizerStepped() && q.optimizerStepped(), "step " + s + ": " + p + " / " + q);
                assertEquals(1.0, p.lossScale());
                assertEquals(65536.0, q.lossScale());
                assertEquals(p.gradNorm(), q.gradNorm(), 0.0, "step " + s + ": the unscaled gradient norm");
                assertEquals(p.loss(), q.loss(), 0.0, "step " + s + ": the loss is unscaled");
                assertArrayEquals(weights(a, plain), weights(b, scaled), "step " + s + ": weights and moments");
            }
            assertEquals(6, scaled.lossScalerCleanSteps());
        }
    }

    @Test
    void theScaleGrowsAfterTheIntervalAndBacksOffOnAnOverflowWhichIsSkipped() {
        try (MambaModel m = model(7);
             Trainer t = trainer(m).lossScaler(LossScaler.dynamic().withInitScale(4).withGrowth(2, 3).withBackoffFactor(0.25))
                     .build()) {
            Random rng = new Random(12);
            float[] x = TestUtil.random(rng, B * T * IN, 1);
            float[] y = TestUtil.random(rng, B * T * D, 1);
            double[] expected = {4, 4, 4, 8, 8, 8, 16};
            for (int s = 0; s < expected.length; s++) {
                StepResult r = t.stepMse(x, y);
                assertTrue(r.optimizerStepped() && !r.skipped(), r.toString());
                assertEquals(expected[s], r.lossScale(), "step " + s);
            }
            assertEquals(16.0, t.lossScale());
            assertEquals(1, t.lossScalerCleanSteps());

            // An output gradient that overflows f32 once scaled by 16: skipped, nothing changes but the scale.
            float[] before = weights(m, t);
            long steps = t.stepCount();
            float[] huge = new float[B * T * D];
            java.util.Arrays.fill(huge, 3e37f);
            t.forward(x);
            StepResult r = t.backward(huge);
            assertTrue(r.skipped() && !r.optimizerStepped(), r.toString());
            assertTrue(r.toString().contains("skipped"), r.toString());
            assertEquals(16.0, r.lossScale(), "the overflowing step's own scale");
            assertEquals(4.0, t.lossScale(), "backed off by 0.25");
            assertEquals(0, t.lossScalerCleanSteps());
            assertEquals(steps, t.stepCount());
            assertArrayEquals(before, weights(m, t), "weights and moments unchanged by the skipped step");
            for (String n : t.parameterNames())
                for (float g : t.gradient(n)) assertEquals(0f, g, "gradients discarded");

            StepResult next = t.stepMse(x, y);
            assertTrue(next.optimizerStepped() && !next.skipped(), next.toString());
            assertEquals(4.0, next.lossScale());
            assertEquals(steps + 1, t.stepCount());

            t.restoreLossScaler(1024, 2);
            assertEquals(1024.0, t.lossScale());
            assertEquals(2, t.lossScalerCleanSteps());
            assertEquals(1024.0, t.stepMse(x, y).lossScale());
            assertEquals(2048.0, t.lossScale(), "the third clean step grew it");
        }
    }

    /** Without a scaler, a non-finite gradient is skipped the same way (the rule is the same for every dtype). */
    @Test
    void withoutAScalerTheSameSkipRuleApplies() {
        for (DType dtype : new DType[] {DType.F32, DType.BF16, DType.F16}) {
            try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(D).dState(4).layers(1).build())
                    .inputDim(IN).seed(3).dtype(dtype).build();
                 Trainer t = Trainer.builder(m).batch(B).seqLen(T).build()) {
                float[] w0 = m.getParameter("input_proj.weight");
                float[] bad = new float[B * T * D];
                bad[5] = Float.NaN;
                t.forward(TestUtil.random(new Random(1), B * T * IN, 1));
                StepResult r = t.backward(bad);
                assertTrue(r.skipped(), dtype + ": " + r);
                assertEquals(1.0, r.lossScale());
                assertEquals(0, t.stepCount());
                assertArrayEquals(w0, m.getParameter("input_proj.weight"), dtype + ": weights unchanged");
            }
        }
    }

    /** The start-state gradient is reported unscaled, and an end-state gradient is scaled like the output gradient. */
    @Test
    void stateGradientsStayInTheLossUnits() {
        Random rng = new Random(13);
        float[] x = TestUtil.random(rng, B * T * IN, 1), y = TestUtil.random(rng, B * T * D, 1);
        float[][] got = new float[2][];
        float[][] grads = new float[2][];
        for (int run = 0; run < 2; run++) {
            try (MambaModel m = model(9); Trainer t = (run == 0 ? trainer(m) : trainer(m).lossScaler(LossScaler.dynamic())).build();
                 MambaState start = m.newState(B); MambaState q = m.newState(B)) {
                Random r = new Random(14);
                for (int b = 0; b < B; b++) {
                    start.writeRow(b, TestUtil.random(r, start.rowSize(), 0.5));
                    q.writeRow(b, TestUtil.random(r, q.rowSize(), 1));
                }
                t.setStateGradients(true);
                t.startFrom(start);
                t.forward(x);
                t.setEndStateGradient(q);
                t.backward(y, BackwardOptions.accumulate());
                got[run] = t.startStateGradient();
                grads[run] = t.gradient("backbone.layers.0.mixer.in_proj.weight");
            }
        }
        assertArrayEquals(got[0], got[1], "start-state gradient with and without a 2^16 scale");
        for (int i = 0; i < grads[0].length; i++) assertEquals(grads[0][i] * 65536f, grads[1][i], 0f, "raw gradient × scale");
    }

    @Test
    void badConfigurationsAreRefused() {
        assertThrows(InvalidConfigException.class, () -> new LossScaler(0, 2, 0.5, 10));
        assertThrows(InvalidConfigException.class, () -> new LossScaler(1e39, 2, 0.5, 10));
        assertThrows(InvalidConfigException.class, () -> new LossScaler(Double.NaN, 2, 0.5, 10));
        assertThrows(InvalidConfigException.class, () -> new LossScaler(8, 1, 0.5, 10));
        assertThrows(InvalidConfigException.class, () -> new LossScaler(8, 2, 1, 10));
        assertThrows(InvalidConfigException.class, () -> new LossScaler(8, 2, 0, 10));
        assertThrows(InvalidConfigException.class, () -> new LossScaler(8, 2, 0.5, 0));
        try (MambaModel m = model(1); Trainer t = Trainer.builder(m).build()) {
            assertFalse(t.lossScaler() != null);
            assertThrows(IllegalStateException.class, () -> t.restoreLossScaler(2, 0));
        }
    }
}
