package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.function.DoubleSupplier;
import java.util.function.Supplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The output head of any width for MSE ({@link Trainer.Builder#outputHead}), on the CPU backend, F32: outputs
 * o = W·y + b of the backbone's final-norm output y, [B, T, width]. The fused MSE step's gradient of every tensor
 * (the head's included) and of the input must match central differences (h = 1e-5) of the double references
 * ({@link Mamba1TrainReference}, {@link Mamba3Reference}) with the head applied in double, to rel L2 {@value #TOL};
 * the loss and the forward to 1e-5. Also: the split calls equal the fused ones bit for bit, saving and loading the
 * head, a scalar target learned, and refused combinations.
 */
class OutputHeadTest {
    private static final long SEED = 20261203L;
    private static final double H = 1e-5, TOL = 1e-3;
    private static final int D = 8, IN = 3;


    /** o = W·y + b per position: y [rows, D] → [rows, width]. */
    private static double[] head(double[] y, int rows, double[] w, double[] b, int width) {
        double[] o = new double[rows * width];
        for (int r = 0; r < rows; r++)
            for (int k = 0; k < width; k++) {
                double s = b[k];
                for (int j = 0; j < D; j++) s += w[k * D + j] * y[r * D + j];
                o[r * width + k] = s;
            }
        return o;
    }

    private static double mse(double[] o, float[] t) {
        double s = 0;
        for (int i = 0; i < o.length; i++) s += (o[i] - t[i]) * (o[i] - t[i]);
        return s / o.length;
    }

    private static void checkAgainstReference(String what, MambaModel model, int B, int T, int width,
                                              java.util.Map<String, double[]> refWeights, double[] xd,
                                              Supplier<double[]> backbone) {
        Random rng = new Random(SEED + width);
        try (Trainer t = Trainer.builder(model).batch(B).seqLen(T).outputHead(width).headSeed(4).build()) {
            assertEquals(width, t.outputWidth());
            assertEquals(0, t.vocab());
            LinearHead h = t.head();
            assertEquals(width, h.vocab());
            double[] hw = Mamba1TrainReference.toDouble(h.weight()), hb = Mamba1TrainReference.toDouble(h.bias());
            float[] x = new float[xd.length];
            for (int i = 0; i < x.length; i++) x[i] = (float) xd[i];
            float[] target = TestUtil.random(rng, B * T * width, 1);

            float[] out = t.forward(x);
            double[] want = head(backbone.get(), B * T, hw, hb, width);
            assertTrue(TestUtil.relL2(out, want) < 1e-5, what + ": forward through the head " + TestUtil.relL2(out, want));

            StepResult r = t.stepMse(x, target, BackwardOptions.accumulate());
            DoubleSupplier loss = () -> mse(head(backbone.get(), B * T, hw, hb, width), target);
            double l = loss.getAsDouble();
            assertEquals(l, r.loss(), 1e-5 * l, what + ": the loss");
            assertEquals((long) B * T * width, r.counted());

            List<String> report = new ArrayList<>();
            for (String name : model.parameterNames())
                check(what + " " + name, t.gradient(name), TestUtil.centralDifferences(refWeights.get(name), H, loss), report);
            check(what + " regression_head.weight", t.gradient("regression_head.weight"), TestUtil.centralDifferences(hw, H, loss), report);
            check(what + " regression_head.bias", t.gradient("regression_head.bias"), TestUtil.centralDifferences(hb, H, loss), report);
            check(what + " input", t.inputGradient(), TestUtil.centralDifferences(xd, H, loss), report);
            System.out.println("output head vs central differences, " + what + ":\n  " + String.join("\n  ", report));
        }
    }

    private static void check(String what, float[] got, double[] want, List<String> report) {
        double err = TestUtil.relL2(got, want);
        report.add(String.format("%-55s %.2e", what, err));
        assertTrue(err < TOL, what + ": rel L2 " + err + "\n  " + String.join("\n  ", report));
    }

    @Test
    void mamba1GradientsThroughAScalarAndAWideHeadMatchCentralDifferences() {
        Random rng = new Random(SEED);
        int B = 2, T = 5;
        try (MambaModel model = StateCarryTest.mamba1(rng, IN, 3)) {
            Mamba1TrainReference ref = new Mamba1TrainReference(model);
            double[] xd = Mamba1TrainReference.toDouble(TestUtil.random(rng, B * T * IN, 1));
            for (int width : new int[] {1, 5})
                checkAgainstReference("Mamba-1, width " + width, model, B, T, width, ref.w, xd,
                        () -> ref.forward(xd, B, T, ref.zeroState(B)));
        }
    }

    @Test
    void mamba3GradientsThroughAHeadMatchCentralDifferences() {
        Random rng = new Random(SEED + 1);
        int B = 2, T = 6;
        try (MambaModel model = StateCarryTest.mamba3(rng, IN, 4)) {
            Mamba3Reference ref = new Mamba3Reference(model);
            double[] xd = Mamba3Reference.toDouble(TestUtil.random(rng, B * T * IN, 1));
            checkAgainstReference("Mamba-3, width 2", model, B, T, 2, ref.w, xd, () -> ref.forward(xd, null, B, T, ref.zeroState(B)));
        }
    }

    /** step(x, dOut) == forward + backward, and stepMse's gradient seed goes through the head, bit for bit. */
    @Test
    void splitAndFusedCallsAgreeBitForBit() {
        float[][] results = new float[2][];
        for (int run = 0; run < 2; run++) {
            Random rng = new Random(SEED + 2);
            try (MambaModel m = StateCarryTest.mamba1(new Random(3), IN, 4);
                 Trainer t = Trainer.builder(m).batch(2).seqLen(4).outputHead(3).build()) {
                float[] x = TestUtil.random(rng, 2 * 4 * IN, 1), dOut = TestUtil.random(rng, 2 * 4 * 3, 1);
                if (run == 0) {
                    t.step(x, dOut, BackwardOptions.accumulate());
                } else {
                    t.forward(x);
                    t.backward(dOut, BackwardOptions.accumulate());
                }
                List<float[]> parts = new ArrayList<>();
                for (String n : t.parameterNames()) parts.add(t.gradient(n));
                parts.add(t.inputGradient());
                results[run] = TestUtil.concat(parts);
            }
        }
        assertArrayEquals(results[0], results[1]);
    }


    /**
     * A scalar target per position (the previous step's first input feature) is learned through a width-1 head, and
     * the trained head saved with {@link LinearHead#save} and loaded into a fresh trainer gives the same outputs.
     */
    @Test
    void aScalarTargetIsLearnedAndTheHeadSavesAndLoads(@TempDir Path dir) {
        int B = 8, T = 12;
        Random rng = new Random(SEED + 3);
        try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(16).dState(8).layers(1).build()).inputDim(2)
                .seed(5).build();
             Trainer t = Trainer.builder(m).batch(B).seqLen(T).outputHead(1).headSeed(2)
                     .adamW(AdamW.ofLearningRate(1e-2)).build()) {
            float[] x = new float[B * T * 2], y = new float[B * T];
            double first = Double.NaN, last = Double.NaN;
            for (int s = 0; s < 150; s++) {
                for (int i = 0; i < x.length; i++) x[i] = (float) rng.nextGaussian();
                for (int b = 0; b < B; b++)
                    for (int k = 1; k < T; k++) y[b * T + k] = x[(b * T + k - 1) * 2];
                StepResult r = t.stepMse(x, y);
                if (s == 0) first = r.loss();
                last = r.loss();
            }
            System.out.println("scalar lag-1 regression: MSE " + first + " -> " + last);
            assertTrue(last < 0.2 * first, "MSE " + first + " -> " + last);

            Path file = dir.resolve("head.safetensors");
            t.head().save(file);
            float[] out = t.forward(x);
            try (Trainer u = Trainer.builder(m).batch(B).seqLen(T).outputHead(1).headSeed(99).build()) {
                u.loadHead(LinearHead.load(file));
                assertArrayEquals(out, u.forward(x), "the loaded head's outputs");
                assertThrows(IllegalArgumentException.class, () -> u.loadHead(new LinearHead(2, 16, new float[32], new float[2])));
            }
        }
    }

    @Test
    void refusedCombinationsAndShapes() {
        Random rng = new Random(SEED + 4);
        try (MambaModel m = StateCarryTest.mamba1(rng, IN, 4);
             MambaModel lm = MambaModel.builder(Mamba1Config.builder().dModel(D).dState(4).layers(1).build()).vocabSize(7).build()) {
            assertThrows(IllegalStateException.class,
                    () -> Trainer.builder(m).crossEntropyHead(3).outputHead(2).build());
            assertThrows(IllegalStateException.class, () -> Trainer.builder(lm).outputHead(2).build());
            assertThrows(IllegalArgumentException.class, () -> Trainer.builder(m).outputHead(0));
            try (Trainer t = Trainer.builder(m).batch(2).seqLen(3).outputHead(2).build()) {
                assertThrows(IllegalStateException.class, () -> t.stepCrossEntropy(new float[2 * 3 * IN], new int[6]));
                assertThrows(IllegalArgumentException.class, () -> t.stepMse(new float[2 * 3 * IN], new float[2 * 3 * D]),
                        "targets are [B, T, width], not [B, T, dModel]");
                assertThrows(IllegalArgumentException.class, () -> t.step(new float[2 * 3 * IN], new float[2 * 3 * D]));
                assertEquals(2 * 3 * 2, t.forward(new float[2 * 3 * IN]).length);
                assertTrue(t.parameterNames().contains("regression_head.weight"));
                assertTrue(t.toString().contains("outputHead=2"), t.toString());
            }
        }
    }
}
