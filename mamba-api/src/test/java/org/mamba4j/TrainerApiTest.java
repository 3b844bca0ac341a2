package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Random;
import org.junit.jupiter.api.Test;

/** The Trainer's contract at its edges: shapes, call order, lifetime, and clear exceptions. */
class TrainerApiTest {
    private static final int IN = 3, B = 2, T = 5, D = 16, V = 4;

    private static MambaModel model() {
        return MambaModel.builder(Mamba1Config.builder().dModel(D).dState(4).layers(1).build()).inputDim(IN).seed(1).build();
    }

    private static float[] x() {
        return TestUtil.random(new Random(1), B * T * IN, 1);
    }

    private static float[] dy() {
        return TestUtil.random(new Random(2), B * T * D, 1);
    }

    @Test
    void wrongShapesAreRejectedBeforeNativeCode() {
        try (MambaModel m = model(); Trainer t = Trainer.builder(m).batch(B).seqLen(T).crossEntropyHead(V).build()) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> t.forward(new float[B * T * IN + 1]));
            assertTrue(e.getMessage().contains("inputs has 31 floats, expected 30"), e.getMessage());
            assertThrows(IllegalArgumentException.class, () -> t.step(x(), new float[3]));
            assertThrows(IllegalArgumentException.class, () -> t.stepMse(x(), new float[B * T * D - 1]));
            assertThrows(IllegalArgumentException.class, () -> t.stepCrossEntropy(x(), new int[B * T + 1]));
            assertThrows(IllegalArgumentException.class, () -> t.burnIn(new float[7], 2));
            assertThrows(IllegalArgumentException.class, () -> t.burnIn(new float[B * IN], 0));
            assertThrows(NullPointerException.class, () -> t.forward(null));
            assertThrows(IllegalArgumentException.class, () -> t.gradient("no.such.tensor"));
            try (MambaState wrongBatch = m.newState(B + 1)) {
                assertThrows(IllegalArgumentException.class, () -> t.startFrom(wrongBatch));
            }
            try (MambaModel other = model(); MambaState foreign = other.newState(B)) {
                assertThrows(IllegalArgumentException.class, () -> t.startFrom(foreign));
                assertThrows(IllegalArgumentException.class, () -> t.snapshot(MambaModel.builder(Mamba1Config.defaults()).build()));
            }
            assertThrows(IllegalArgumentException.class, () -> t.loadHead(new LinearHead(V + 1, D, new float[(V + 1) * D], new float[V + 1])));
        }
    }

    @Test
    void badValuesAndCallOrderGiveClearErrors() {
        try (MambaModel m = model(); Trainer t = Trainer.builder(m).batch(B).seqLen(T).crossEntropyHead(V).build()) {
            // call order: libmamba's checks surface as IllegalStateException
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> t.backward(dy()));
            assertTrue(e.getMessage().contains("backward needs a forward first"), e.getMessage());
            assertThrows(IllegalStateException.class, t::inputGradient);
            try (MambaState s = m.newState(B)) {
                assertThrows(IllegalStateException.class, () -> t.readEndState(s), "no forward yet");
            }
            t.forward(x());
            t.backward(dy(), BackwardOptions.accumulate());
            assertThrows(IllegalStateException.class, () -> t.backward(dy()), "one backward per forward");
            int[] bad = new int[B * T];
            bad[3] = V;
            // a native range check: an argument error, not a bare MambaException
            IllegalArgumentException range = assertThrows(IllegalArgumentException.class, () -> t.stepCrossEntropy(x(), bad));
            assertTrue(range.getMessage().contains("targets[3] = 4 is outside [0, 4)"), range.getMessage());
            assertThrows(IllegalArgumentException.class, () -> BackwardOptions.step().scale(Double.NaN));
        }
        try (MambaModel m = model(); Trainer t = Trainer.builder(m).batch(B).seqLen(T).build()) {
            assertThrows(IllegalStateException.class, () -> t.stepCrossEntropy(x(), new int[B * T]), "no head");
            assertThrows(IllegalStateException.class, t::head);
        }
        assertThrows(NullPointerException.class, () -> Trainer.builder(null));
        try (MambaModel m = model()) {
            assertThrows(IllegalArgumentException.class, () -> Trainer.builder(m).batch(0));
            assertThrows(IllegalArgumentException.class, () -> Trainer.builder(m).clipGradNorm(-1));
            assertThrows(IllegalArgumentException.class, () -> Trainer.builder(m).threads(0));
        }
        assertThrows(InvalidConfigException.class, () -> AdamW.ofLearningRate(-1));
        assertThrows(InvalidConfigException.class, () -> AdamW.defaults().betas(0.9, 1.0));
        assertThrows(InvalidConfigException.class, () -> AdamW.defaults().eps(0));
    }

    @Test
    void closedTrainerOrModelThrowsIllegalState() {
        MambaModel m = model();
        Trainer t = Trainer.builder(m).batch(B).seqLen(T).build();
        t.close();
        t.close();  // idempotent
        assertTrue(t.isClosed());
        assertThrows(IllegalStateException.class, () -> t.forward(x()));
        assertThrows(IllegalStateException.class, t::optimizerStep);
        Trainer t2 = Trainer.builder(m).batch(B).seqLen(T).build();
        m.close();
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> t2.step(x(), dy()));
        assertTrue(e.getMessage().contains("MambaModel is closed"), e.getMessage());
        t2.close();
        assertThrows(IllegalStateException.class, () -> Trainer.builder(m).build());
    }

    /** A NaN gradient skips the optimizer step (weights untouched, gradients dropped) and says so. */
    @Test
    void nonFiniteGradientSkipsTheStep() {
        try (MambaModel m = model(); Trainer t = Trainer.builder(m).batch(B).seqLen(T).build()) {
            float[] before = m.getParameter("backbone.layers.0.mixer.in_proj.weight");
            float[] g = dy();
            g[5] = Float.NaN;
            StepResult r = t.step(x(), g);
            assertTrue(r.skipped());
            assertFalse(r.optimizerStepped());
            assertTrue(Double.isNaN(r.gradNorm()));
            assertEquals(0, r.step());
            assertArrayEquals(before, m.getParameter("backbone.layers.0.mixer.in_proj.weight"));
            assertArrayEquals(new float[before.length], t.gradient("backbone.layers.0.mixer.in_proj.weight"));
            StepResult ok = t.step(x(), dy());
            assertTrue(ok.optimizerStepped() && !ok.skipped() && ok.step() == 1);
        }
    }

    @Test
    void snapshotTargetForwardAndSupport() {
        assertTrue(Trainer.supports(Device.cpu()));
        try (MambaModel m = model(); Trainer t = Trainer.builder(m).batch(B).seqLen(T).build()) {
            try (MambaModel before = t.snapshot()) {
                assertArrayEquals(m.forward(x(), B, T), before.forward(x(), B, T));
                t.step(x(), dy());
                // the trainer trains the model in place; the snapshot keeps the old weights
                assertArrayEquals(m.forward(x(), B, T), t.targetForward(x(), B, T));
                assertFalse(TestUtil.relL2(before.forward(x(), B, T), m.forward(x(), B, T)) == 0);
                t.snapshot(before);
                assertArrayEquals(m.forward(x(), B, T), before.forward(x(), B, T));
            }
            assertEquals(m.parameterNames(), t.parameterNames());
            assertEquals(0, t.vocab());
        }
    }
}
