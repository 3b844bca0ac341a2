package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** AdamW against a hand-computed reference, no-decay groups, clipping, learning-rate changes, and resume. */
class TrainerOptimizerTest {
    private static final Mamba1Config CONFIG = Mamba1Config.builder().dModel(16).dState(4).layers(2).build();
    private static final int IN = 3, B = 2, T = 9, V = 5;

    private static MambaModel model() {
        return MambaModel.builder(CONFIG).inputDim(IN).seed(21).build();
    }

    private static float[] data(int seed, int n, double scale) {
        return TestUtil.random(new Random(seed), n, scale);
    }

    /** PyTorch's AdamW on one tensor, in double from the float gradient; m, v, p updated in place. */
    private static void adamWReference(double[] p, double[] m, double[] v, float[] g, long step, double lr, double b1,
                                       double b2, double eps, double wd, double clipScale) {
        double bc1 = 1 - Math.pow(b1, step), bc2 = 1 - Math.pow(b2, step);
        for (int i = 0; i < p.length; i++) {
            double gi = g[i] * clipScale;
            p[i] -= lr * wd * p[i];
            m[i] = b1 * m[i] + (1 - b1) * gi;
            v[i] = b2 * v[i] + (1 - b2) * gi * gi;
            p[i] -= lr * (m[i] / bc1) / (Math.sqrt(v[i] / bc2) + eps);
        }
    }

    private static float[] minus(float[] a, float[] b) {
        float[] d = new float[a.length];
        for (int i = 0; i < a.length; i++) d[i] = a[i] - b[i];
        return d;
    }

    @Test
    void defaultNoDecayGroups() {
        try (MambaModel m = model(); Trainer t = Trainer.builder(m).batch(B).seqLen(T).crossEntropyHead(V).build()) {
            for (String n : t.parameterNames()) {
                boolean noDecay = n.endsWith("norm.weight") || n.endsWith("norm_f.weight") || n.endsWith(".bias")
                        || n.endsWith("A_log") || n.endsWith(".D");
                assertEquals(!noDecay, t.weightDecay(n), n);
            }
            assertTrue(t.weightDecay("lm_head.weight"));
            assertFalse(t.weightDecay("lm_head.bias"));
        }
        try (MambaModel m = model();
             Trainer t = Trainer.builder(m).batch(B).seqLen(T).adamW(AdamW.defaults().noDecay(n -> n.contains("x_proj"))).build()) {
            for (String n : t.parameterNames()) assertEquals(!n.contains("x_proj"), t.weightDecay(n), n);
        }
    }

    /**
     * Three AdamW steps (with weight decay 0.3 so decoupled decay is visible, and the default no-decay groups)
     * against PyTorch's formulas in double, fed with the native gradients of each step. The update
     * Δp = p_after − p_before and the moments must match to relative L2 error 1e-4 / 1e-6.
     */
    @Test
    void adamWMatchesAHandComputedReferenceOverThreeSteps() {
        double lr = 1e-2, b1 = 0.8, b2 = 0.95, eps = 1e-6, wd = 0.3;
        try (MambaModel model = model();
             Trainer t = Trainer.builder(model).batch(B).seqLen(T).crossEntropyHead(V)
                     .adamW(AdamW.ofLearningRate(lr).betas(b1, b2).eps(eps).weightDecay(wd)).build()) {
            List<String> names = t.parameterNames();
            Map<String, double[]> m = new HashMap<>(), v = new HashMap<>();
            for (int step = 1; step <= 3; step++) {
                int[] targets = new int[B * T];
                Random r = new Random(step);
                for (int i = 0; i < targets.length; i++) targets[i] = r.nextInt(V);
                t.stepCrossEntropy(data(100 + step, B * T * IN, 1), targets, BackwardOptions.accumulate());
                Map<String, float[]> before = new HashMap<>(), grad = new HashMap<>();
                for (String n : names) {
                    before.put(n, param(t, n));
                    grad.put(n, t.gradient(n));
                }
                StepResult res = t.optimizerStep();
                assertTrue(res.optimizerStepped());
                assertEquals(step, res.step());
                assertEquals(lr, res.learningRate(), 1e-9);
                OptimizerState state = t.exportOptimizerState();
                assertEquals(step, state.step());
                for (String n : names) {
                    float[] p0 = before.get(n);
                    double[] p = Mamba1TrainReference.toDouble(p0);
                    double[] mm = m.computeIfAbsent(n, k -> new double[p0.length]);
                    double[] vv = v.computeIfAbsent(n, k -> new double[p0.length]);
                    adamWReference(p, mm, vv, grad.get(n), step, lr, b1, b2, eps, t.weightDecay(n) ? wd : 0, 1);
                    float[] p1 = param(t, n);
                    double[] dRef = new double[p.length];  // Δp of the reference
                    for (int i = 0; i < p.length; i++) dRef[i] = p[i] - p0[i];
                    double errUpdate = TestUtil.relL2(minus(p1, p0), dRef);
                    assertTrue(errUpdate < 1e-4, "step " + step + " " + n + ": update error " + errUpdate);
                    assertTrue(TestUtil.relL2(state.firstMoment(n), mm) < 1e-6, "step " + step + " " + n + ": m");
                    assertTrue(TestUtil.relL2(state.secondMoment(n), vv) < 1e-6, "step " + step + " " + n + ": v");
                    assertArrayEquals(new float[p0.length], t.gradient(n), "gradients are cleared after a step");
                }
            }
        }
    }

    /** Global-norm clipping: the reported norm is the pre-clip norm of the whole gradient; the step uses g·c/(‖g‖+1e-6). */
    @Test
    void clippingScalesTheWholeGradientAndReportsThePreClipNorm() {
        double lr = 1e-2, clip = 0.05;
        try (MambaModel model = model();
             Trainer t = Trainer.builder(model).batch(B).seqLen(T).clipGradNorm(clip)
                     .adamW(AdamW.ofLearningRate(lr).weightDecay(0)).build()) {
            // Two accumulated micro-batches, then the step: Adam's first step is scale-free, so check the second.
            for (int step = 1; step <= 2; step++) {
                t.step(data(7 + step, B * T * IN, 1), data(8 + step, B * T * 16, 1), BackwardOptions.accumulate());
                t.step(data(9 + step, B * T * IN, 1), data(10 + step, B * T * 16, 1), BackwardOptions.accumulate());
                double ss = 0;
                Map<String, float[]> grad = new HashMap<>(), before = new HashMap<>();
                for (String n : t.parameterNames()) {
                    float[] g = t.gradient(n);
                    for (float x : g) ss += (double) x * x;
                    grad.put(n, g);
                    before.put(n, model.getParameter(n));
                }
                double norm = Math.sqrt(ss);
                assertTrue(norm > clip, "the test needs a gradient larger than the clip norm");
                OptimizerState s0 = t.exportOptimizerState();
                StepResult r = t.optimizerStep();
                assertEquals(norm, r.gradNorm(), 1e-6 * norm, "pre-clip norm");
                for (String n : t.parameterNames()) {
                    double[] p = Mamba1TrainReference.toDouble(before.get(n));
                    double[] m = Mamba1TrainReference.toDouble(s0.firstMoment(n)), v = Mamba1TrainReference.toDouble(s0.secondMoment(n));
                    adamWReference(p, m, v, grad.get(n), step, lr, 0.9, 0.999, 1e-8, 0, clip / (norm + 1e-6));
                    double[] dRef = new double[p.length];
                    float[] p0 = before.get(n);
                    for (int i = 0; i < p.length; i++) dRef[i] = p[i] - p0[i];
                    assertTrue(TestUtil.relL2(minus(model.getParameter(n), p0), dRef) < 1e-4, n);
                    assertTrue(TestUtil.relL2(t.exportOptimizerState().firstMoment(n), m) < 1e-6, n + " m");
                }
            }
        }
    }

    @Test
    void learningRateChangesBetweenStepsAndSchedulesApply() {
        try (MambaModel model = model(); Trainer t = Trainer.builder(model).batch(B).seqLen(T).build()) {
            float[] before = model.getParameter("backbone.layers.0.mixer.in_proj.weight");
            t.setLearningRate(0);
            StepResult r = t.step(data(1, B * T * IN, 1), data(2, B * T * 16, 1));
            assertEquals(0, r.learningRate());
            assertArrayEquals(before, model.getParameter("backbone.layers.0.mixer.in_proj.weight"), "lr 0 leaves weights unchanged");
            t.setLearningRate(1e-2);
            assertEquals(1e-2, t.step(data(1, B * T * IN, 1), data(2, B * T * 16, 1)).learningRate(), 1e-9);
            assertFalse(TestUtil.relL2(model.getParameter("backbone.layers.0.mixer.in_proj.weight"), before) == 0);
        }
        LearningRateSchedule s = LearningRateSchedule.warmupCosine(1e-2, 2, 6, 1e-4);
        try (MambaModel model = model(); Trainer t = Trainer.builder(model).batch(B).seqLen(T).schedule(s).build()) {
            for (int k = 0; k < 8; k++) {
                StepResult r = t.step(data(k, B * T * IN, 1), data(k + 50, B * T * 16, 1));
                assertEquals((float) s.learningRate(k), r.learningRate(), 0.0, "step " + k);
            }
        }
    }

    /**
     * 6 uninterrupted steps == 3 steps, save (model, head, optimizer state), load into fresh objects, 3 more
     * steps — bit for bit, with a learning-rate schedule that depends on the step count.
     */
    @Test
    void resumeFromSavedStateIsBitIdentical(@TempDir Path dir) {
        LearningRateSchedule s = LearningRateSchedule.warmupCosine(5e-3, 2, 6, 1e-4);
        float[][] results = new float[2][];
        for (int run = 0; run < 2; run++) {
            MambaModel model = model();
            Trainer t = Trainer.builder(model).batch(B).seqLen(T).crossEntropyHead(V).clipGradNorm(1).schedule(s)
                    .adamW(AdamW.ofLearningRate(1e-3).weightDecay(0.05)).build();
            for (int k = 0; k < 6; k++) {
                if (run == 1 && k == 3) {  // interrupt: save everything, drop it, load it back
                    model.save(dir.resolve("model.safetensors"));
                    t.head().save(dir.resolve("head.safetensors"));
                    t.exportOptimizerState().save(dir.resolve("adamw.safetensors"));
                    t.close();
                    model.close();
                    model = MambaModel.load(dir.resolve("model.safetensors"));
                    t = Trainer.builder(model).batch(B).seqLen(T).crossEntropyHead(V).clipGradNorm(1).schedule(s)
                            .adamW(AdamW.ofLearningRate(1e-3).weightDecay(0.05)).build();
                    t.loadHead(LinearHead.load(dir.resolve("head.safetensors")));
                    t.importOptimizerState(OptimizerState.load(dir.resolve("adamw.safetensors")));
                    assertEquals(3, t.stepCount());
                }
                int[] targets = new int[B * T];
                Random r = new Random(k);
                for (int i = 0; i < targets.length; i++) targets[i] = r.nextInt(V);
                t.stepCrossEntropy(data(300 + k, B * T * IN, 1), targets);
            }
            float[] all = new float[0];
            for (String n : t.parameterNames()) {
                float[] p = n.startsWith("lm_head") ? (n.endsWith("weight") ? t.head().weight() : t.head().bias()) : model.getParameter(n);
                float[] grown = new float[all.length + p.length];
                System.arraycopy(all, 0, grown, 0, all.length);
                System.arraycopy(p, 0, grown, all.length, p.length);
                all = grown;
            }
            results[run] = all;
            t.close();
            model.close();
        }
        assertArrayEquals(results[0], results[1]);
    }

    private static float[] param(Trainer t, String n) {
        if (n.equals("lm_head.weight")) return t.head().weight();
        if (n.equals("lm_head.bias")) return t.head().bias();
        return t.model().getParameter(n);
    }
}
