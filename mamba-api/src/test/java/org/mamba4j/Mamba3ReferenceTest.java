package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * The double reference ({@link Mamba3Reference}) checked against itself, with no native forward involved (the
 * models only supply weights and names): the recurrence against the quadratic whole-sequence form of the note's
 * §3 (incoming K/V/θ state folded in), split sequences against whole ones, and the analytic backward against
 * central differences of the double forward for every element of every tensor and of the input. These make the
 * reference fit to judge the native kernels (Mamba3StepTest, Mamba3GradientTest, Mamba3GpuTest).
 */
class Mamba3ReferenceTest {
    private static final long SEED = 20260311L;

    /** A model of the given kind with random weights (only its weights and names are used here). */
    static MambaModel model(Mamba3Config c, int inputDim, int vocab, boolean tie, Random rng) {
        MambaModel.Builder b = MambaModel.builder(c).seed(rng.nextLong());
        if (vocab > 0) b.vocabSize(vocab).tieEmbeddings(tie);
        else b.inputDim(inputDim);
        MambaModel m = b.build();
        Mamba3Reference.randomize(m, rng);
        return m;
    }

    record Kind(String name, Mamba3Config c, int inputDim, int vocab, boolean tie) {}

    static List<Kind> smallKinds() {
        return List.of(
                new Kind("float input 3, ngroups 2, d_state 6 (1 angle), headdim 4, gate norm",
                        Mamba3Config.builder().dModel(8).expand(2).headdim(4).dState(6).ngroups(2).layers(2)
                                .outprojNorm(true).build(), 3, 0, false),
                new Kind("no input projection, rope_fraction 1, d_state 8, headdim 8",
                        Mamba3Config.builder().dModel(8).headdim(8).dState(8).ropeFraction(1.0).layers(2).build(), 0, 0, false),
                new Kind("language model, untied head, vocab 7",
                        Mamba3Config.builder().dModel(8).headdim(4).dState(4).layers(1).build(), 0, 7, false),
                new Kind("language model, tied head, vocab 6, d_state 5 (odd)",
                        Mamba3Config.builder().dModel(8).headdim(8).dState(5).layers(2).build(), 0, 6, true));
    }

    private static double[] inputs(Random rng, Mamba3Reference ref, int B, int T) {
        return ref.vocab > 0 ? null : Mamba3Reference.toDouble(TestUtil.random(rng, B * T * ref.inputWidth(), 1));
    }

    private static int[] ids(Random rng, Mamba3Reference ref, int B, int T) {
        if (ref.vocab == 0) return null;
        int[] ids = new int[B * T];
        for (int i = 0; i < ids.length; i++) ids[i] = rng.nextInt(ref.vocab);
        return ids;
    }

    private static double[][] randomState(Random rng, Mamba3Reference ref, int B) {
        double[][] s = new double[B][];
        for (int b = 0; b < B; b++) s[b] = Mamba3Reference.toDouble(ref.randomStateRow(rng, 0.5));
        return s;
    }

    private static double relL2(double[] a, double[] b) {
        double num = 0, den = 0;
        for (int i = 0; i < a.length; i++) {
            num += (a[i] - b[i]) * (a[i] - b[i]);
            den += b[i] * b[i];
        }
        return Math.sqrt(num / den);
    }

    @Test
    void recurrenceEqualsTheQuadraticFormWithIncomingState() {
        Random rng = new Random(SEED);
        for (Kind k : smallKinds()) {
            int B = 2, T = 17;
            try (MambaModel m = model(k.c, k.inputDim, k.vocab, k.tie, rng)) {
                Mamba3Reference ref = new Mamba3Reference(m);
                double[][] s0 = randomState(rng, ref, B);
                double[] x = inputs(rng, ref, B, T);
                int[] ids = ids(rng, ref, B, T);
                double[][] sr = Mamba3Reference.copy(s0), sq = Mamba3Reference.copy(s0);
                double err = relL2(ref.forwardQuadratic(x, ids, B, T, sq), ref.forward(x, ids, B, T, sr));
                assertTrue(err < 1e-12, k.name + ": quadratic form vs recurrence, rel L2 " + err);
                // The same from a zero state (the β₀ term vanishes).
                double err0 = relL2(ref.forwardQuadratic(x, ids, B, T, ref.zeroState(B)), ref.forward(x, ids, B, T, ref.zeroState(B)));
                assertTrue(err0 < 1e-12, k.name + ": from zero, rel L2 " + err0);
            }
        }
    }

    @Test
    void splitSequencesAndStepsEqualTheWholeSequence() {
        Random rng = new Random(SEED + 1);
        Kind k = smallKinds().get(0);
        int B = 2, T1 = 5, T2 = 8, T = T1 + T2;
        try (MambaModel m = model(k.c, k.inputDim, k.vocab, k.tie, rng)) {
            Mamba3Reference ref = new Mamba3Reference(m);
            int w = ref.inputWidth(), o = ref.outputWidth();
            double[][] s0 = randomState(rng, ref, B);
            double[] x = inputs(rng, ref, B, T);
            double[][] sw = Mamba3Reference.copy(s0);
            double[] whole = ref.forward(x, null, B, T, sw);
            double[] x1 = new double[B * T1 * w], x2 = new double[B * T2 * w];
            for (int b = 0; b < B; b++) {
                System.arraycopy(x, b * T * w, x1, b * T1 * w, T1 * w);
                System.arraycopy(x, (b * T + T1) * w, x2, b * T2 * w, T2 * w);
            }
            double[][] ss = Mamba3Reference.copy(s0);
            ref.forward(x1, null, B, T1, ss);
            double[] second = ref.forward(x2, null, B, T2, ss);
            double[][] st = Mamba3Reference.copy(s0);
            double worst = 0;
            for (int t = 0; t < T; t++) {
                float[] xt = new float[B * w];
                for (int b = 0; b < B; b++)
                    for (int i = 0; i < w; i++) xt[b * w + i] = (float) x[(b * T + t) * w + i];
                double[] yt = ref.step(xt, null, st);
                for (int b = 0; b < B; b++)
                    for (int i = 0; i < o; i++) {
                        worst = Math.max(worst, Math.abs(yt[b * o + i] - whole[(b * T + t) * o + i]));
                        if (t >= T1) worst = Math.max(worst, Math.abs(second[(b * T2 + t - T1) * o + i] - whole[(b * T + t) * o + i]));
                    }
            }
            assertTrue(worst < 1e-12, "steps / split vs whole: max abs " + worst);
            for (int b = 0; b < B; b++) {
                assertTrue(relL2(ss[b], sw[b]) < 1e-12 && relL2(st[b], sw[b]) < 1e-12, "end state row " + b);
            }
        }
    }

    /**
     * The analytic backward vs central differences (h = 1e-5, double) of L = ⟨out, P⟩ for every element of every
     * tensor and of the input, from a random incoming state (angles near 2π included). Truncation error O(h²)
     * and rounding ≈ 1e-16/h leave about 1e-9 relative; the bound is 1e-7 per tensor.
     */
    @Test
    void analyticBackwardMatchesCentralDifferences() {
        Random rng = new Random(SEED + 2);
        double h = 1e-5;
        for (Kind k : smallKinds()) {
            int B = 2, T = 7;
            try (MambaModel m = model(k.c, k.inputDim, k.vocab, k.tie, rng)) {
                Mamba3Reference ref = new Mamba3Reference(m);
                double[][] s0 = randomState(rng, ref, B);
                double[] x = inputs(rng, ref, B, T);
                int[] ids = ids(rng, ref, B, T);
                double[] P = Mamba3Reference.toDouble(TestUtil.random(rng, B * T * ref.outputWidth(), 1));
                Mamba3Reference.Gradients g = ref.backward(x, ids, B, T, s0, P);
                java.util.function.DoubleSupplier loss =
                        () -> Mamba3Reference.dot(ref.forward(x, ids, B, T, Mamba3Reference.copy(s0)), P);
                List<String> report = new ArrayList<>();
                for (String name : m.parameterNames()) {
                    double[] fd = TestUtil.centralDifferences(ref.w.get(name), h, loss);
                    double err = relL2(g.params().get(name), fd);
                    report.add(String.format("%-40s %.2e", name, err));
                    assertTrue(err < 1e-7, k.name + ": " + name + " rel L2 " + err + "\n" + String.join("\n", report));
                }
                if (x != null) {
                    double err = relL2(g.input(), TestUtil.centralDifferences(x, h, loss));
                    report.add(String.format("%-40s %.2e", "input", err));
                    assertTrue(err < 1e-7, k.name + ": input rel L2 " + err);
                }
                System.out.println("reference backward vs central differences, " + k.name + ":\n  " + String.join("\n  ", report));
            }
        }
    }

}
