package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/**
 * The non-finite policy (MambaModel's Javadoc, docs/reliability.md): inference inputs holding NaN or ±Infinity
 * are rejected with the index named and the state untouched; a training step whose loss or gradient is
 * non-finite is skipped — never applied — and reported in {@link StepResult}, also when the bad micro-batch
 * was accumulated before the step.
 */
class NonFiniteTest {
    private static final int D = 16, IN = 3, B = 2, T = 4;
    private static final float[] BAD = {Float.NaN, Float.POSITIVE_INFINITY, Float.NEGATIVE_INFINITY};

    private static MambaModel model() {
        return MambaModel.builder(Mamba1Config.builder().dModel(D).dState(4).layers(2).build()).inputDim(IN).seed(9).build();
    }

    private static void assertRejected(int index, Executable call) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, call);
        assertTrue(e.getMessage().startsWith("x[" + index + "] is "), e.getMessage());
    }

    private static FloatBuffer direct(float[] v) {
        FloatBuffer b = ByteBuffer.allocateDirect(4 * v.length).order(ByteOrder.nativeOrder()).asFloatBuffer();
        b.put(v).flip();
        return b;
    }

    @Test
    void inferenceInputsWithNanOrInfinityAreRejectedAndTheStateIsUntouched() {
        Random rng = new Random(1);
        try (MambaModel m = model(); MambaState s = m.newState(B)) {
            m.prefill(s, TestUtil.random(rng, B * T * IN, 1), T);  // a state worth protecting
            float[] row0 = s.readRow(0), row1 = s.readRow(1);
            for (float bad : BAD) {
                float[] x = TestUtil.random(rng, B * IN, 1);
                x[4] = bad;
                assertRejected(4, () -> m.step(s, x));
                assertRejected(4, () -> m.step(s, direct(x), direct(new float[B * D])));
                float[] prompt = TestUtil.random(rng, B * T * IN, 1);
                prompt[B * T * IN - 1] = bad;
                assertRejected(B * T * IN - 1, () -> m.prefill(s, prompt, T));
                assertRejected(B * T * IN - 1, () -> m.prefill(s, direct(prompt), T, direct(new float[B * D])));
                assertRejected(B * T * IN - 1, () -> m.forward(s, prompt, B, T));
                assertRejected(B * T * IN - 1, () -> m.forward(prompt, B, T));
            }
            assertArrayEquals(row0, s.readRow(0), 0f);
            assertArrayEquals(row1, s.readRow(1), 0f);
        }
    }

    @Test
    void aBufferIsCheckedBetweenItsPositionAndLimit() {
        try (MambaModel m = model(); MambaState s = m.newState(1)) {
            FloatBuffer bad = direct(new float[] {Float.NaN, 1, 2, Float.NaN, 5});
            bad.position(1).limit(1 + IN);  // the input is [1, 2, NaN]: index 2
            assertRejected(2, () -> m.step(s, bad, direct(new float[D])));
            FloatBuffer good = direct(new float[] {Float.NaN, 1, 2, 3, Float.NaN});
            good.position(1).limit(1 + IN);  // NaNs outside the input are not its business
            m.step(s, good, direct(new float[D]));
        }
    }

    @Test
    void aNonFiniteInputSkipsTheTrainingStepAndTheNextOneWorks() {
        try (MambaModel m = model(); Trainer t = Trainer.builder(m).batch(B).seqLen(T).build()) {
            Random rng = new Random(2);
            float[] before = m.getParameter("input_proj.weight");
            float[] x = TestUtil.random(rng, B * T * IN, 1), target = TestUtil.random(rng, B * T * D, 1);
            x[7] = Float.NaN;
            StepResult r = t.stepMse(x, target);
            assertTrue(r.skipped());
            assertFalse(r.optimizerStepped());
            assertTrue(Double.isNaN(r.loss()));
            assertEquals(0, t.stepCount());
            assertArrayEquals(before, m.getParameter("input_proj.weight"), 0f);
            x[7] = 0.5f;
            StepResult ok = t.stepMse(x, target);
            assertTrue(ok.optimizerStepped() && !ok.skipped() && Double.isFinite(ok.loss()));
        }
    }

    /**
     * A loss that overflows float while its gradient stays finite (targets near 1e30): the gradient norm alone
     * would let this step through; the loss check skips it.
     */
    @Test
    void aLossThatOverflowsSkipsTheStepEvenWithAFiniteGradient() {
        try (MambaModel m = model(); Trainer t = Trainer.builder(m).batch(B).seqLen(T).clipGradNorm(1).build()) {
            float[] before = m.getParameter("input_proj.weight");
            float[] x = TestUtil.random(new Random(3), B * T * IN, 1), target = new float[B * T * D];
            java.util.Arrays.fill(target, 1e30f);
            StepResult r = t.stepMse(x, target);
            assertTrue(Double.isInfinite(r.loss()), "loss " + r.loss());
            assertTrue(Double.isFinite(r.gradNorm()), "the gradient is finite: " + r.gradNorm());
            assertTrue(r.skipped());
            assertEquals(0, r.step());
            assertArrayEquals(before, m.getParameter("input_proj.weight"), 0f);
        }
    }

    /** A poisoned micro-batch accumulated earlier poisons the step that applies the sum: skipped, gradients dropped. */
    @Test
    void anAccumulatedNonFiniteLossSkipsTheLaterStep() {
        try (MambaModel m = model(); Trainer t = Trainer.builder(m).batch(B).seqLen(T).build()) {
            Random rng = new Random(4);
            float[] before = m.getParameter("input_proj.weight");
            float[] x = TestUtil.random(rng, B * T * IN, 1), target = TestUtil.random(rng, B * T * D, 1);
            float[] huge = new float[B * T * D];
            java.util.Arrays.fill(huge, 1e30f);
            StepResult first = t.stepMse(x, huge, BackwardOptions.accumulate());
            assertFalse(first.optimizerStepped() || first.skipped());  // nothing asked yet
            StepResult second = t.stepMse(x, target, BackwardOptions.step());
            assertTrue(second.skipped());
            assertEquals(0, t.stepCount());
            assertArrayEquals(before, m.getParameter("input_proj.weight"), 0f);
            assertArrayEquals(new float[before.length], t.gradient("input_proj.weight"), 0f);
            assertTrue(t.stepMse(x, target).optimizerStepped(), "the poison was dropped with the gradients");
        }
    }

    @Test
    void theStepResultSaysWhy() {
        StepResult r = new StepResult(0, false, true, Double.NaN, 1e-3, Double.NaN, Double.NaN, 0);
        assertTrue(r.toString().contains("skipped: non-finite loss or gradient"), r.toString());
    }
}
