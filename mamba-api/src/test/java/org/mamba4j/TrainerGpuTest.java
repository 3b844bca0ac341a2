package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Training on the CUDA backend against the CPU backend (the reference: its gradients are checked against
 * finite differences in {@link TrainGradientCheckTest}) and against itself. Same weights and data on both:
 * the training forward (rel L2 < 1e-5), every parameter's and the input's gradient (cosine ≥ 0.9999 and
 * rel L2 < 1e-4 per tensor), the cross-entropy head's loss (rel < 1e-5), weights after 20 fused AdamW
 * steps (rel L2 < 1e-3), bit-identical GPU reruns, a task learned on the GPU, and BF16 storage (f32 master
 * weights, bf16 forward products, the bf16 copy refreshed after every optimizer step).
 * Skipped where no CUDA device is usable.
 */
@Tag("gpu")
class TrainerGpuTest {
    private static final long SEED = 20250117L;

    @BeforeAll
    static void needsGpu() {
        Assumptions.assumeTrue(Device.cudaCount() > 0, () -> "no CUDA device: " + Device.cudaUnavailableReason());
    }

    /** A CPU model with random weights and a CUDA model (given dtype) holding the same weights. */
    private static final class Pair implements AutoCloseable {
        final MambaModel cpu, gpu;

        Pair(Mamba1Config c, int inputDim, long seed, DType gpuType) {
            cpu = MambaModel.builder(c).inputDim(inputDim).seed(seed).build();
            MambaModel g = null;
            try {
                TestUtil.randomizeWeights(cpu, new Random(seed));
                g = MambaModel.builder(c).inputDim(inputDim).seed(seed).device(Device.cuda(0)).dtype(gpuType).build();
                for (String n : cpu.parameterNames()) g.setParameter(n, cpu.getParameter(n));
            } catch (RuntimeException e) {
                if (g != null) g.close();
                cpu.close();
                throw e;
            }
            gpu = g;
        }

        @Override
        public void close() {
            gpu.close();
            cpu.close();
        }
    }

    static double cosine(float[] a, float[] b) {
        double ab = 0, aa = 0, bb = 0;
        for (int i = 0; i < a.length; i++) {
            ab += (double) a[i] * b[i];
            aa += (double) a[i] * a[i];
            bb += (double) b[i] * b[i];
        }
        return aa == 0 && bb == 0 ? 1 : ab / Math.sqrt(aa * bb);
    }

    /** Asserts cosine ≥ minCos and rel L2 < maxRel of got vs want; adds a line to the report. */
    private static void assertClose(String what, float[] got, float[] want, double minCos, double maxRel, List<String> report) {
        double cos = cosine(got, want), rel = TestUtil.relL2(got, want);
        report.add(String.format("%-45s cos %.8f  rel %.2e", what, cos, rel));
        assertTrue(cos >= minCos && rel < maxRel, what + ": cosine " + cos + ", rel L2 " + rel + "\n" + String.join("\n", report));
    }

    @Test
    void cudaTrainingIsSupported() {
        assertTrue(Trainer.supports(Device.cuda(0)), "Trainer.supports(cuda:0)");
        assertTrue(Trainer.supports(Device.cpu()));
    }

    /**
     * Two shapes: d_inner 96 with d_state 16 (three channel blocks of the scan kernels), T = 80 (two state
     * checkpoints of 64 steps, a partial one) from a burn-in state, with an input projection; and a tiny one
     * (d_state 4, d_conv 3, dt_rank 2, no input projection) from a zero state.
     */
    @Test
    void forwardAndEveryGradientMatchTheCpu() {
        record Shape(Mamba1Config c, int in, int B, int T, int burn) {}
        List<Shape> shapes = List.of(
                new Shape(Mamba1Config.builder().dModel(48).dState(16).layers(2).build(), 5, 3, 80, 7),
                new Shape(Mamba1Config.builder().dModel(8).dState(4).dConv(3).expand(2).dtRank(2).layers(2).build(), 0, 2, 5, 0));
        for (Shape s : shapes) {
            Random rng = new Random(SEED + s.T);
            try (Pair p = new Pair(s.c, s.in, SEED, DType.F32);
                 Trainer tc = Trainer.builder(p.cpu).batch(s.B).seqLen(s.T).build();
                 Trainer tg = Trainer.builder(p.gpu).batch(s.B).seqLen(s.T).build()) {
                int w = p.cpu.inputWidth(), D = s.c.dModel();
                if (s.burn > 0) {
                    float[] prefix = TestUtil.random(rng, s.B * s.burn * w, 1);
                    tc.burnIn(prefix, s.burn);
                    tg.burnIn(prefix, s.burn);
                }
                float[] x = TestUtil.random(rng, s.B * s.T * w, 1), P = TestUtil.random(rng, s.B * s.T * D, 1);
                float[] yc = tc.forward(x), yg = tg.forward(x);
                double fwd = TestUtil.relL2(yg, yc);
                assertTrue(fwd < 1e-5, "training forward GPU vs CPU: rel L2 " + fwd);
                try (MambaState ec = p.cpu.newState(s.B); MambaState eg = p.gpu.newState(s.B)) {
                    tc.readEndState(ec);
                    tg.readEndState(eg);
                    for (int b = 0; b < s.B; b++) {
                        double e = TestUtil.relL2(eg.readRow(b), ec.readRow(b));
                        assertTrue(e < 1e-5, "end state row " + b + ": rel L2 " + e);
                    }
                }
                tc.backward(P, BackwardOptions.accumulate());
                tg.backward(P, BackwardOptions.accumulate());
                List<String> report = new ArrayList<>();
                report.add(String.format("%-45s rel %.2e", "forward", fwd));
                for (String n : tc.parameterNames())
                    assertClose(n, tg.gradient(n), tc.gradient(n), 0.9999, 1e-4, report);
                assertClose("input", tg.inputGradient(), tc.inputGradient(), 0.9999, 1e-4, report);
                System.out.println("GPU vs CPU training, d_model " + D + ", T " + s.T + ":\n  " + String.join("\n  ", report));
            }
        }
    }

    @Test
    void crossEntropyHeadMatchesTheCpu() {
        Mamba1Config c = Mamba1Config.builder().dModel(32).dState(8).layers(2).build();
        int B = 4, T = 70, IN = 6, V = 11;
        Random rng = new Random(SEED + 1);
        try (Pair p = new Pair(c, IN, SEED + 1, DType.F32);
             Trainer tc = Trainer.builder(p.cpu).batch(B).seqLen(T).crossEntropyHead(V).headSeed(9).build();
             Trainer tg = Trainer.builder(p.gpu).batch(B).seqLen(T).crossEntropyHead(V).headSeed(9).build()) {
            assertArrayEquals(tc.head().weight(), tg.head().weight(), "the same head initialisation");
            float[] x = TestUtil.random(rng, B * T * IN, 1);
            int[] targets = new int[B * T];
            for (int i = 0; i < targets.length; i++) targets[i] = i % 7 == 3 ? Trainer.DEFAULT_IGNORE_INDEX : rng.nextInt(V);
            StepResult rc = tc.stepCrossEntropy(x, targets, BackwardOptions.accumulate());
            StepResult rg = tg.stepCrossEntropy(x, targets, BackwardOptions.accumulate());
            assertEquals(rc.counted(), rg.counted());
            double rel = Math.abs(rg.loss() - rc.loss()) / Math.abs(rc.loss());
            assertTrue(rel < 1e-5, "cross-entropy loss GPU " + rg.loss() + " vs CPU " + rc.loss());
            assertEquals(rc.accuracy(), rg.accuracy(), 1.5 / rc.counted(), "accuracy");
            List<String> report = new ArrayList<>();
            for (String n : tc.parameterNames())
                assertClose(n, tg.gradient(n), tc.gradient(n), 0.9999, 1e-4, report);
            assertClose("input", tg.inputGradient(), tc.inputGradient(), 0.9999, 1e-4, report);
            StepResult ec = tc.evaluateCrossEntropy(x, targets), eg = tg.evaluateCrossEntropy(x, targets);
            assertTrue(Math.abs(eg.loss() - ec.loss()) < 1e-5 * Math.abs(ec.loss()), "evaluation loss " + eg + " vs " + ec);
            System.out.printf("cross-entropy GPU %.7f CPU %.7f (rel %.2e)%n", rg.loss(), rc.loss(), rel);
        }
    }

    @Test
    void twentyAdamWStepsTrackTheCpu() {
        Mamba1Config c = Mamba1Config.builder().dModel(32).dState(16).layers(2).build();
        int B = 2, T = 40, IN = 4;
        try (Pair p = new Pair(c, IN, SEED + 2, DType.F32);
             Trainer tc = Trainer.builder(p.cpu).batch(B).seqLen(T).adamW(AdamW.ofLearningRate(1e-3).weightDecay(0.01))
                     .clipGradNorm(1.0).build();
             Trainer tg = Trainer.builder(p.gpu).batch(B).seqLen(T).adamW(AdamW.ofLearningRate(1e-3).weightDecay(0.01))
                     .clipGradNorm(1.0).build()) {
            Random rng = new Random(SEED + 2);
            double worstLoss = 0;
            for (int k = 0; k < 20; k++) {
                float[] x = TestUtil.random(rng, B * T * IN, 1), target = TestUtil.random(rng, B * T * 32, 1);
                StepResult rc = tc.stepMse(x, target), rg = tg.stepMse(x, target);
                assertTrue(rc.optimizerStepped() && rg.optimizerStepped());
                worstLoss = Math.max(worstLoss, Math.abs(rg.loss() - rc.loss()) / rc.loss());
                assertEquals(rc.gradNorm(), rg.gradNorm(), 1e-3 * rc.gradNorm(), "step " + k + " gradient norm");
            }
            assertTrue(worstLoss < 1e-4, "MSE loss GPU vs CPU over 20 steps: worst rel " + worstLoss);
            List<String> report = new ArrayList<>();
            for (String n : p.cpu.parameterNames())
                assertClose(n, p.gpu.getParameter(n), p.cpu.getParameter(n), 0.999, 1e-3, report);
            System.out.println("after 20 AdamW steps (worst loss rel " + worstLoss + "):\n  " + String.join("\n  ", report));
        }
    }

    /** Everything a few mixed steps produce, as float arrays. */
    private static List<float[]> gpuRun() {
        Mamba1Config c = Mamba1Config.builder().dModel(64).dState(8).layers(2).build();
        int B = 4, T = 80, IN = 6, V = 7;
        List<float[]> out = new ArrayList<>();
        try (MambaModel m = MambaModel.builder(c).inputDim(IN).seed(11).device(Device.cuda(0)).build();
             Trainer t = Trainer.builder(m).batch(B).seqLen(T).adamW(AdamW.ofLearningRate(3e-3).weightDecay(0.1))
                     .clipGradNorm(0.5).crossEntropyHead(V).headSeed(3).build()) {
            Random rng = new Random(5);
            int[] targets = new int[B * T];
            for (int i = 0; i < targets.length; i++) targets[i] = i % 5 == 0 ? Trainer.DEFAULT_IGNORE_INDEX : rng.nextInt(V);
            List<StepResult> rs = new ArrayList<>();
            rs.add(t.step(TestUtil.random(rng, B * T * IN, 1), TestUtil.random(rng, B * T * 64, 0.01)));
            rs.add(t.stepCrossEntropy(TestUtil.random(rng, B * T * IN, 1), targets));
            t.forward(TestUtil.random(rng, B * T * IN, 1));
            rs.add(t.backward(TestUtil.random(rng, B * T * 64, 0.01)));
            rs.add(t.stepMse(TestUtil.random(rng, B * T * IN, 1), TestUtil.random(rng, B * T * 64, 1)));
            rs.add(t.stepCrossEntropy(TestUtil.random(rng, B * T * IN, 1), targets));
            for (String n : m.parameterNames()) out.add(m.getParameter(n));
            out.add(t.head().weight());
            out.add(t.head().bias());
            out.add(t.inputGradient());
            float[] r = new float[rs.size() * 3];
            for (int i = 0; i < rs.size(); i++) {
                r[3 * i] = (float) rs.get(i).loss();
                r[3 * i + 1] = (float) rs.get(i).gradNorm();
                r[3 * i + 2] = (float) rs.get(i).accuracy();
            }
            out.add(r);
        }
        return out;
    }

    @Test
    void gpuRunsAreBitIdentical() {
        List<float[]> a = gpuRun(), b = gpuRun();
        assertEquals(a.size(), b.size());
        for (int i = 0; i < a.size(); i++) assertArrayEquals(a.get(i), b.get(i), "item " + i + " differs between GPU runs");
    }

    /**
     * "Recall the token seen 2 steps ago" (as TrainerLearningTest on the CPU), trained on the GPU: on fresh data
     * the loss must fall below 0.1 and the accuracy exceed 97% within 300 steps of B = 8, T = 24.
     */
    @Test
    void lagTwoRecallIsLearnedOnTheGpu() {
        int V = 4, B = 8, T = 24, LAG = 2, steps = 300;
        Random rng = new Random(42);
        try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(16).dState(8).layers(1).build())
                .inputDim(V).seed(3).device(Device.cuda(0)).build();
             Trainer t = Trainer.builder(m).batch(B).seqLen(T).crossEntropyHead(V)
                     .adamW(AdamW.ofLearningRate(1e-2).weightDecay(0.0)).clipGradNorm(1.0).build()) {
            float[] x = new float[B * T * V];
            int[] y = new int[B * T];
            StepResult first = null, last = null;
            for (int s = 0; s < steps; s++) {
                TrainerLearningTest.lagRecallBatch(rng, x, y, B, T, V, LAG);
                last = t.stepCrossEntropy(x, y);
                if (first == null) first = last;
            }
            TrainerLearningTest.lagRecallBatch(new Random(7), x, y, B, T, V, LAG);
            StepResult eval = t.evaluateCrossEntropy(x, y);
            System.out.println("GPU lag-2 recall: first " + first + ", after " + steps + " steps " + last + ", eval " + eval);
            assertTrue(eval.loss() < 0.1 && eval.accuracy() > 0.97, "after " + steps + " steps: last " + last + ", eval " + eval);
        }
    }

    /**
     * BF16 storage: the trainer keeps f32 master weights (the model's parameters), runs the forward's products
     * on the bf16 copy and the backward in f32, and refreshes the bf16 copy after every optimizer step.
     * Gradients track the F32 model's (cosine ≥ 0.99 per tensor); after steps, the trainer's forward equals
     * that of a fresh BF16 model given the trained weights, bit for bit (so the copy was refreshed), and the
     * weights track the F32 run.
     */
    @Test
    void bf16StorageTrainsWithF32MasterWeights() {
        Mamba1Config c = Mamba1Config.builder().dModel(64).dState(16).layers(2).build();
        int B = 2, T = 48, IN = 8;
        Random rng = new Random(SEED + 3);
        try (Pair f = new Pair(c, IN, SEED + 3, DType.F32); Pair h = new Pair(c, IN, SEED + 3, DType.BF16);
             Trainer t32 = Trainer.builder(f.gpu).batch(B).seqLen(T).adamW(AdamW.ofLearningRate(1e-3)).build();
             Trainer t16 = Trainer.builder(h.gpu).batch(B).seqLen(T).adamW(AdamW.ofLearningRate(1e-3)).build()) {
            assertEquals(DType.BF16, h.gpu.dtype());
            float[] x = TestUtil.random(rng, B * T * IN, 1), P = TestUtil.random(rng, B * T * 64, 1);
            float[] y32 = t32.forward(x), y16 = t16.forward(x);
            double fwd = cosine(y16, y32);
            assertTrue(fwd > 0.999, "bf16 training forward vs f32: cosine " + fwd);
            t32.backward(P, BackwardOptions.accumulate());
            t16.backward(P, BackwardOptions.accumulate());
            List<String> report = new ArrayList<>();
            for (String n : t32.parameterNames()) {
                double cos = cosine(t16.gradient(n), t32.gradient(n));
                report.add(String.format("%-45s cos %.6f", n, cos));
                assertTrue(cos >= 0.99, n + ": bf16 vs f32 gradient cosine " + cos + "\n" + String.join("\n", report));
            }
            System.out.println("BF16 vs F32 gradients (GPU):\n  " + String.join("\n  ", report));
            t32.zeroGrad();
            t16.zeroGrad();
            for (int k = 0; k < 5; k++) {
                float[] xs = TestUtil.random(rng, B * T * IN, 1), target = TestUtil.random(rng, B * T * 64, 1);
                t32.stepMse(xs, target);
                t16.stepMse(xs, target);
            }
            for (String n : f.gpu.parameterNames()) {
                double rel = TestUtil.relL2(h.gpu.getParameter(n), f.gpu.getParameter(n));
                assertTrue(rel < 2e-2, n + ": bf16-trained weights vs f32-trained: rel L2 " + rel);
            }
            try (MambaModel fresh = MambaModel.builder(c).inputDim(IN).device(Device.cuda(0)).dtype(DType.BF16).build();
                 Trainer tf = Trainer.builder(fresh).batch(B).seqLen(T).build()) {
                for (String n : h.gpu.parameterNames()) fresh.setParameter(n, h.gpu.getParameter(n));
                assertArrayEquals(tf.forward(x), t16.forward(x), "the trainer's bf16 copy was refreshed after the steps");
                assertArrayEquals(fresh.forward(x, B, T), h.gpu.forward(x, B, T), "the model's bf16 copy too");
            }
        }
    }
}
