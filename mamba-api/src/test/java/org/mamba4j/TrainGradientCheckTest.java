package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.function.DoubleSupplier;
import org.junit.jupiter.api.Test;

/**
 * Finite-difference gradient checks of the native backward (f32) against an independent double-precision
 * Java forward ({@link Mamba1TrainReference}).
 *
 * <p>Method: the loss is a fixed random projection L = ⟨out, P⟩ (not Σ out, which cancels through the final
 * RMSNorm). The reference gradient of every element of every weight tensor and of the input is the central
 * difference (L(w+h) − L(w−h)) / 2h in double with h = 1e-5 (truncation error O(h²) ≈ 1e-10, rounding
 * ≈ 1e-16/h ≈ 1e-11 relative). The native gradient is backward of dOut = P. Per tensor, the relative L2
 * error ‖g_native − g_fd‖ / ‖g_fd‖ must be below 1e-3; f32 forward + backward typically lands at 1e-6..1e-5.
 * The start state comes from a burn-in prefix (non-zero conv history and SSM state) and is held constant,
 * as truncated BPTT defines the gradient. Weights are randomised so A_log, D, biases and norms are generic.
 */
class TrainGradientCheckTest {
    private static final long SEED = 20240601L;
    private static final double H = 1e-5, TOL = 1e-3;

    private static MambaModel tinyModel(Random rng, int inputDim) {
        MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(8).dState(4).dConv(3).expand(2).dtRank(2)
                .layers(2).build()).inputDim(inputDim).seed(rng.nextLong()).build();
        TestUtil.randomizeWeights(m, rng);
        return m;
    }



    @Test
    void everyWeightAndTheInputMatchFiniteDifferencesFromABurnInState() {
        Random rng = new Random(SEED);
        int B = 2, T = 5, Tb = 3, IN = 3;
        try (MambaModel model = tinyModel(rng, IN);
             Trainer trainer = Trainer.builder(model).batch(B).seqLen(T).build()) {
            float[] prefix = TestUtil.random(rng, B * Tb * IN, 1);
            float[] x = TestUtil.random(rng, B * T * IN, 1);
            float[] P = TestUtil.random(rng, B * T * 8, 1);

            trainer.burnIn(prefix, Tb);
            float[] y = trainer.forward(x);
            trainer.backward(P, BackwardOptions.accumulate());

            Mamba1TrainReference ref = new Mamba1TrainReference(model);
            Mamba1TrainReference.State start = ref.zeroState(B);
            ref.forward(Mamba1TrainReference.toDouble(prefix), B, Tb, start);  // held constant below
            double[] xd = Mamba1TrainReference.toDouble(x);
            double[] yRef = ref.forward(xd, B, T, ref.copy(start));
            assertTrue(TestUtil.relL2(y, yRef) < 1e-5, "training forward vs double reference: " + TestUtil.relL2(y, yRef));

            DoubleSupplier loss = () -> TestUtil.dot(ref.forward(xd, B, T, ref.copy(start)), P);
            List<String> report = new ArrayList<>();
            for (String name : model.parameterNames()) {
                double[] fd = TestUtil.centralDifferences(ref.w.get(name), H, loss);
                double err = TestUtil.relL2(trainer.gradient(name), fd);
                report.add(String.format("%s %.2e", name, err));
                assertTrue(err < TOL, name + ": relative error " + err + "\n" + String.join("\n", report));
            }
            double[] fdx = TestUtil.centralDifferences(xd, H, loss);
            double errX = TestUtil.relL2(trainer.inputGradient(), fdx);
            assertTrue(errX < TOL, "input gradient: relative error " + errX);
            report.add(String.format("input %.2e", errX));
            System.out.println("gradient check, relative L2 error per tensor:\n  " + String.join("\n  ", report));
        }
    }

    @Test
    void noInputProjectionFromZeroStateIncludingTheInput() {
        Random rng = new Random(SEED + 1);
        int B = 3, T = 4;
        try (MambaModel model = tinyModel(rng, 0);
             Trainer trainer = Trainer.builder(model).batch(B).seqLen(T).build()) {
            assertEquals(8, trainer.inputWidth());
            float[] x = TestUtil.random(rng, B * T * 8, 1);
            float[] P = TestUtil.random(rng, B * T * 8, 1);
            trainer.step(x, P, BackwardOptions.accumulate());
            Mamba1TrainReference ref = new Mamba1TrainReference(model);
            double[] xd = Mamba1TrainReference.toDouble(x);
            DoubleSupplier loss = () -> TestUtil.dot(ref.forward(xd, B, T, ref.zeroState(B)), P);
            for (String name : model.parameterNames()) {
                double err = TestUtil.relL2(trainer.gradient(name), TestUtil.centralDifferences(ref.w.get(name), H, loss));
                assertTrue(err < TOL, name + ": relative error " + err);
            }
            double errX = TestUtil.relL2(trainer.inputGradient(), TestUtil.centralDifferences(xd, H, loss));
            assertTrue(errX < TOL, "input gradient: relative error " + errX);
        }
    }

    /**
     * A shape that crosses the CPU kernels' internal boundaries: d_inner = 80 (a full and a partial channel
     * block of 64) and T = 70 (a full and a partial scan chunk of 64), on two threads. Central differences
     * on 17 evenly spread elements of every tensor and of the input (relative L2 over those elements).
     */
    @Test
    void blockAndChunkBoundaries() {
        Random rng = new Random(SEED + 4);
        int B = 2, T = 70, IN = 2, threads = org.mamba4j.nativ.global.libmamba.cpuThreads();
        try (MambaModel model = MambaModel.builder(Mamba1Config.builder().dModel(40).dState(4).dConv(4).layers(1).build())
                .inputDim(IN).seed(5).build()) {
            TestUtil.randomizeWeights(model, rng);
            try (Trainer trainer = Trainer.builder(model).batch(B).seqLen(T).threads(2).build()) {
                float[] prefix = TestUtil.random(rng, B * 2 * IN, 1);
                float[] x = TestUtil.random(rng, B * T * IN, 1);
                float[] P = TestUtil.random(rng, B * T * 40, 1);
                trainer.burnIn(prefix, 2);
                trainer.step(x, P, BackwardOptions.accumulate());
                Mamba1TrainReference ref = new Mamba1TrainReference(model);
                Mamba1TrainReference.State start = ref.zeroState(B);
                ref.forward(Mamba1TrainReference.toDouble(prefix), B, 2, start);
                double[] xd = Mamba1TrainReference.toDouble(x);
                DoubleSupplier loss = () -> TestUtil.dot(ref.forward(xd, B, T, ref.copy(start)), P);
                for (String name : model.parameterNames()) {
                    double err = sampledError(trainer.gradient(name), ref.w.get(name), loss);
                    assertTrue(err < TOL, name + ": relative error " + err);
                }
                double errX = sampledError(trainer.inputGradient(), xd, loss);
                assertTrue(errX < TOL, "input gradient: relative error " + errX);
            } finally {
                org.mamba4j.nativ.global.libmamba.setCpuThreads(threads);
            }
        }
    }

    private static double sampledError(float[] g, double[] arr, DoubleSupplier loss) {
        int k = Math.min(17, arr.length);
        float[] got = new float[k];
        double[] want = new double[k];
        for (int j = 0; j < k; j++) {
            int i = k == arr.length ? j : (int) ((long) j * (arr.length - 1) / (k - 1));
            double v = arr[i];
            arr[i] = v + H;
            double lp = loss.getAsDouble();
            arr[i] = v - H;
            double lm = loss.getAsDouble();
            arr[i] = v;
            want[j] = (lp - lm) / (2 * H);
            got[j] = g[i];
        }
        return TestUtil.relL2(got, want);
    }

    /** The fused cross-entropy head: its loss, and the gradients of the head, a few layers and the input. */
    @Test
    void crossEntropyHeadMatchesFiniteDifferences() {
        Random rng = new Random(SEED + 2);
        int B = 2, T = 6, IN = 3, V = 5, IGNORE = -1;
        try (MambaModel model = tinyModel(rng, IN);
             Trainer trainer = Trainer.builder(model).batch(B).seqLen(T).crossEntropyHead(V).headSeed(7)
                     .ignoreIndex(IGNORE).build()) {
            float[] x = TestUtil.random(rng, B * T * IN, 1);
            int[] targets = new int[B * T];
            for (int i = 0; i < targets.length; i++) targets[i] = i % 4 == 1 ? IGNORE : rng.nextInt(V);
            // A head with a non-zero bias, so every term is exercised.
            LinearHead h0 = trainer.head();
            trainer.loadHead(new LinearHead(V, 8, h0.weight(), TestUtil.random(rng, V, 0.5)));
            StepResult r = trainer.stepCrossEntropy(x, targets, BackwardOptions.accumulate());
            assertEquals(9, r.counted());

            Mamba1TrainReference ref = new Mamba1TrainReference(model);
            ref.setHead(trainer.head());
            double[] xd = Mamba1TrainReference.toDouble(x);
            DoubleSupplier loss = () -> ref.crossEntropy(ref.forward(xd, B, T, ref.zeroState(B)), B * T, targets, IGNORE);
            assertEquals(loss.getAsDouble(), r.loss(), 1e-5 * Math.abs(loss.getAsDouble()), "loss");
            for (String name : List.of(LinearHead.WEIGHT, LinearHead.BIAS, "backbone.layers.0.mixer.A_log",
                    "backbone.layers.1.mixer.in_proj.weight", "input_proj.weight", "backbone.norm_f.weight")) {
                double err = TestUtil.relL2(trainer.gradient(name), TestUtil.centralDifferences(ref.w.get(name), H, loss));
                assertTrue(err < TOL, name + ": relative error " + err);
            }
            double errX = TestUtil.relL2(trainer.inputGradient(), TestUtil.centralDifferences(xd, H, loss));
            assertTrue(errX < TOL, "input gradient: relative error " + errX);
        }
    }

    /** Fused MSE equals the split path with MseLoss's gradient (same loss, gradients to f32 rounding). */
    @Test
    void fusedMseMatchesSplitMse() {
        Random rng = new Random(SEED + 3);
        int B = 2, T = 7, IN = 3;
        try (MambaModel model = tinyModel(rng, IN);
             Trainer trainer = Trainer.builder(model).batch(B).seqLen(T).build()) {
            float[] x = TestUtil.random(rng, B * T * IN, 1);
            float[] target = TestUtil.random(rng, B * T * 8, 1);
            StepResult fused = trainer.stepMse(x, target, BackwardOptions.accumulate());
            List<float[]> g1 = new ArrayList<>();
            for (String n : model.parameterNames()) g1.add(trainer.gradient(n));
            trainer.zeroGrad();
            LossGradient lg = MseLoss.compute(trainer.forward(x), target);
            trainer.backward(lg.gradient(), BackwardOptions.accumulate());
            assertEquals(lg.loss(), fused.loss(), 1e-6 * lg.loss());
            assertEquals((long) B * T * 8, fused.counted());
            for (int i = 0; i < g1.size(); i++) {
                String n = model.parameterNames().get(i);
                assertTrue(TestUtil.relL2(g1.get(i), trainer.gradient(n)) < 1e-5, n);
            }
        }
    }
}
