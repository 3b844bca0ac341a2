package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.function.DoubleSupplier;
import org.junit.jupiter.api.Test;

/**
 * State carry with gradients (truncated BPTT over windows of a stream) on the CPU backend, F32.
 *
 * <p>Loss L = ⟨out, P⟩ + ⟨endState, Q⟩ for fixed random P, Q, starting from a random non-zero state s₀. The trainer
 * runs backward(P) with setEndStateGradient(Q) and state gradients on. Its ∂L/∂s₀ (every float of the state row:
 * Mamba-1 conv history and h; Mamba-3 S, k_prev, v_prev, angles) and the gradient of every weight (which now
 * includes the end-state term) must match central differences of the double references
 * ({@link Mamba1TrainReference}, {@link Mamba3Reference}; h = 1e-5) to rel L2 {@value #TOL} per tensor.
 *
 * <p>Two windows with the state carried, window 2's start-state gradient fed back into window 1's backward, must give
 * the gradients of one backward through time over the concatenated sequence (to f32 rounding, rel L2
 * {@value #WINDOW_TOL}), and the same start-state gradient.
 */
class StateCarryTest {
    private static final long SEED = 20261201L;
    private static final double H = 1e-5, TOL = 1e-3, WINDOW_TOL = 1e-5;

    // ---------------------------------------------------------------- helpers



    /** A state holding `rows` ([B · rowSize]) in its row layout. */
    private static MambaState stateOf(MambaModel m, int B, float[] rows) {
        MambaState s = m.newState(B);
        int n = s.rowSize();
        float[] row = new float[n];
        for (int b = 0; b < B; b++) {
            System.arraycopy(rows, b * n, row, 0, n);
            s.writeRow(b, row);
        }
        return s;
    }

    private static float[] rowsOf(MambaState s) {
        int n = s.rowSize();
        float[] out = new float[s.batch() * n];
        for (int b = 0; b < s.batch(); b++) System.arraycopy(s.readRow(b), 0, out, b * n, n);
        return out;
    }

    // ---------------------------------------------------------------- Mamba-1 rows ↔ reference state

    /** The reference state of rows in the model layout (per layer: conv history [E][K−1], then h [E][N]). */
    private static Mamba1TrainReference.State m1State(Mamba1TrainReference ref, double[] rows, int B) {
        Mamba1TrainReference.State s = ref.zeroState(B);
        int K1 = ref.dConv - 1, E = ref.dInner, N = ref.dState, layer = E * K1 + E * N, row = layer * ref.layers;
        for (int b = 0; b < B; b++)
            for (int l = 0; l < ref.layers; l++) {
                int o = b * row + l * layer;
                for (int d = 0; d < E; d++) {
                    for (int k = 0; k < K1; k++) s.conv[b][l][d][k] = rows[o + d * K1 + k];
                    for (int n = 0; n < N; n++) s.ssm[b][l][d][n] = rows[o + E * K1 + d * N + n];
                }
            }
        return s;
    }

    private static double m1Dot(Mamba1TrainReference ref, Mamba1TrainReference.State s, float[] q) {
        int K1 = ref.dConv - 1, E = ref.dInner, N = ref.dState, layer = E * K1 + E * N, row = layer * ref.layers;
        double sum = 0;
        for (int b = 0; b < s.conv.length; b++)
            for (int l = 0; l < ref.layers; l++) {
                int o = b * row + l * layer;
                for (int d = 0; d < E; d++) {
                    for (int k = 0; k < K1; k++) sum += s.conv[b][l][d][k] * q[o + d * K1 + k];
                    for (int n = 0; n < N; n++) sum += s.ssm[b][l][d][n] * q[o + E * K1 + d * N + n];
                }
            }
        return sum;
    }

    static MambaModel mamba1(Random rng, int inputDim, int dConv) {
        MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(8).dState(4).dConv(dConv).expand(2).dtRank(2)
                .layers(2).build()).inputDim(inputDim).seed(rng.nextLong()).build();
        TestUtil.randomizeWeights(m, rng);
        return m;
    }

    static MambaModel mamba3(Random rng, int inputDim, int chunk) {
        return Mamba3ReferenceTest.model(Mamba3Config.builder().dModel(8).headdim(4).dState(6).ngroups(2)
                .outprojNorm(true).layers(2).chunkSize(chunk).build(), inputDim, 0, false, rng);
    }

    /** A random start state: Mamba-3 through its reference (angles in [0, 2π)), Mamba-1 uniform in ±0.5. */
    static float[] randomStart(Random rng, MambaModel m, int B) {
        if (m.config() instanceof Mamba3Config) {
            Mamba3Reference ref = new Mamba3Reference(m);
            float[] rows = new float[B * ref.rowSize()];
            for (int b = 0; b < B; b++) System.arraycopy(ref.randomStateRow(rng, 0.5), 0, rows, b * ref.rowSize(), ref.rowSize());
            return rows;
        }
        try (MambaState s = m.newState(B)) {
            return TestUtil.random(rng, B * s.rowSize(), 0.5);
        }
    }

    /** Runs the trainer's backward of L = ⟨out, P⟩ + ⟨end, Q⟩ from start s0; returns ∂L/∂s0. */
    private static float[] trainerGradients(MambaModel m, Trainer t, int B, float[] s0, float[] x, float[] P, float[] Q) {
        t.setStateGradients(true);
        try (MambaState start = stateOf(m, B, s0); MambaState q = stateOf(m, B, Q)) {
            t.startFrom(start);
            t.forward(x);
            t.setEndStateGradient(q);
            t.backward(P, BackwardOptions.accumulate());
        }
        return t.startStateGradient();
    }

    // ---------------------------------------------------------------- central differences

    @Test
    void mamba1StartStateAndWeightGradientsMatchCentralDifferences() {
        Random rng = new Random(SEED);
        // T 5 > d_conv − 1, and T 1 < d_conv − 1 = 3 (the end history still holds start-history slots).
        int[][] shapes = {{5, 3}, {1, 4}};
        for (int[] sh : shapes) {
            int B = 2, T = sh[0], IN = 3;
            try (MambaModel model = mamba1(rng, IN, sh[1]); Trainer t = Trainer.builder(model).batch(B).seqLen(T).build()) {
                int rowSize;
                try (MambaState probe = model.newState(1)) {
                    rowSize = probe.rowSize();
                }
                float[] s0 = randomStart(rng, model, B);
                float[] x = TestUtil.random(rng, B * T * IN, 1);
                float[] P = TestUtil.random(rng, B * T * 8, 1);
                float[] Q = TestUtil.random(rng, B * rowSize, 1);
                float[] ds0 = trainerGradients(model, t, B, s0, x, P, Q);

                Mamba1TrainReference ref = new Mamba1TrainReference(model);
                double[] xd = Mamba1TrainReference.toDouble(x), s0d = Mamba1TrainReference.toDouble(s0);
                DoubleSupplier loss = () -> {
                    Mamba1TrainReference.State s = m1State(ref, s0d, B);
                    double l = TestUtil.dot(ref.forward(xd, B, T, s), P);
                    return l + m1Dot(ref, s, Q);
                };
                List<String> report = new ArrayList<>();
                check("T " + T + " d_conv " + sh[1] + ": start state", ds0, TestUtil.centralDifferences(s0d, H, loss), report);
                for (String name : model.parameterNames())
                    check("T " + T + ": " + name, t.gradient(name), TestUtil.centralDifferences(ref.w.get(name), H, loss), report);
                check("T " + T + ": input", t.inputGradient(), TestUtil.centralDifferences(xd, H, loss), report);
                System.out.println("Mamba-1 state carry vs central differences:\n  " + String.join("\n  ", report));
            }
        }
    }

    @Test
    void mamba3StartStateAndWeightGradientsMatchCentralDifferences() {
        Random rng = new Random(SEED + 1);
        int B = 2, T = 12, IN = 3;
        try (MambaModel model = mamba3(rng, IN, 8); Trainer t = Trainer.builder(model).batch(B).seqLen(T).build()) {
            Mamba3Reference ref = new Mamba3Reference(model);
            float[] s0 = randomStart(rng, model, B);
            float[] x = TestUtil.random(rng, B * T * IN, 1);
            float[] P = TestUtil.random(rng, B * T * 8, 1);
            float[] Q = TestUtil.random(rng, B * ref.rowSize(), 1);
            float[] ds0 = trainerGradients(model, t, B, s0, x, P, Q);

            double[] xd = Mamba3Reference.toDouble(x), s0d = Mamba3Reference.toDouble(s0);
            int n = ref.rowSize();
            DoubleSupplier loss = () -> {
                double[][] s = new double[B][n];
                for (int b = 0; b < B; b++) System.arraycopy(s0d, b * n, s[b], 0, n);
                double l = TestUtil.dot(ref.forward(xd, null, B, T, s), P);
                for (int b = 0; b < B; b++)
                    for (int i = 0; i < n; i++) l += s[b][i] * Q[b * n + i];
                return l;
            };
            List<String> report = new ArrayList<>();
            check("Mamba-3 start state", ds0, TestUtil.centralDifferences(s0d, H, loss), report);
            // the angles alone (their gradient is the sum of every step's and the end's)
            double[] fd = TestUtil.centralDifferences(s0d, H, loss);
            List<Float> got = new ArrayList<>();
            List<Double> want = new ArrayList<>();
            for (int i = 0; i < ds0.length; i++)
                if (ref.isAngle(i % n)) {
                    got.add(ds0[i]);
                    want.add(fd[i]);
                }
            float[] ga = new float[got.size()];
            double[] wa = new double[want.size()];
            for (int i = 0; i < ga.length; i++) {
                ga[i] = got.get(i);
                wa[i] = want.get(i);
            }
            assertTrue(ga.length > 0, "the model has angles");
            check("Mamba-3 start angles", ga, wa, report);
            for (String name : model.parameterNames())
                check(name, t.gradient(name), TestUtil.centralDifferences(ref.w.get(name), H, loss), report);
            check("input", t.inputGradient(), TestUtil.centralDifferences(xd, H, loss), report);
            System.out.println("Mamba-3 state carry vs central differences:\n  " + String.join("\n  ", report));
        }
    }

    private static void check(String what, float[] got, double[] want, List<String> report) {
        double err = TestUtil.relL2(got, want);
        report.add(String.format("%-50s %.2e", what, err));
        assertTrue(err < TOL, what + ": rel L2 " + err + "\n  " + String.join("\n  ", report));
    }

    // ---------------------------------------------------------------- windows == one backward through time

    @Test
    void twoWindowsWithCarriedGradientsEqualOneBackwardThroughTime() {
        Random rng = new Random(SEED + 2);
        for (int arch = 0; arch < 2; arch++) {
            int B = 2, T = 9, IN = 3;
            try (MambaModel model = arch == 0 ? mamba1(rng, IN, 4) : mamba3(rng, IN, 4)) {
                String name = arch == 0 ? "Mamba-1" : "Mamba-3";
                float[] s0 = randomStart(rng, model, B);
                float[] x = TestUtil.random(rng, B * 2 * T * IN, 1);
                float[] P = TestUtil.random(rng, B * 2 * T * 8, 1);
                float[][] xw = split(x, B, T, IN), pw = split(P, B, T, 8);
                List<float[]> full = new ArrayList<>(), windows = new ArrayList<>();
                float[] fullEnd, windowEnd;
                try (Trainer t = Trainer.builder(model).batch(B).seqLen(2 * T).build();
                     MambaState start = stateOf(model, B, s0); MambaState end = model.newState(B)) {
                    t.setStateGradients(true);
                    t.startFrom(start);
                    t.forward(x);
                    t.backward(P, BackwardOptions.accumulate());
                    t.readEndState(end);
                    fullEnd = rowsOf(end);
                    for (String n : model.parameterNames()) full.add(t.gradient(n));
                    full.add(t.startStateGradient());
                }
                try (Trainer t = Trainer.builder(model).batch(B).seqLen(T).build();
                     MambaState start = stateOf(model, B, s0); MambaState s1 = model.newState(B);
                     MambaState ds1 = model.newState(B); MambaState end = model.newState(B)) {
                    t.setStateGradients(true);
                    t.startFrom(start);
                    t.forward(xw[0]);
                    t.readEndState(s1);
                    t.startFrom(s1);  // window 2 from window 1's end
                    t.forward(xw[1]);
                    t.readEndState(end);
                    t.backward(pw[1], BackwardOptions.accumulate());
                    t.readStartStateGradient(ds1);
                    t.startFrom(start);  // window 1 again (its tape was replaced), backward with window 2's ∂L/∂s1
                    t.forward(xw[0]);
                    t.setEndStateGradient(ds1);
                    t.backward(pw[0], BackwardOptions.accumulate());
                    windowEnd = rowsOf(end);
                    for (String n : model.parameterNames()) windows.add(t.gradient(n));
                    windows.add(t.startStateGradient());
                }
                double e = TestUtil.relL2(windowEnd, fullEnd);
                assertTrue(e < WINDOW_TOL, name + ": end state of two windows vs one: rel L2 " + e);
                List<String> names = new ArrayList<>(model.parameterNames());
                names.add("start state");
                List<String> report = new ArrayList<>();
                for (int i = 0; i < names.size(); i++) {
                    double err = TestUtil.relL2(windows.get(i), full.get(i));
                    report.add(String.format("%-50s %.2e", names.get(i), err));
                    assertTrue(err < WINDOW_TOL, name + " " + names.get(i) + ": two windows vs one backward rel L2 " + err
                            + "\n  " + String.join("\n  ", report));
                }
                System.out.println(name + ": two carried windows vs one backward through time:\n  " + String.join("\n  ", report));
            }
        }
    }

    /** [B, 2T, w] → the two windows [B, T, w]. */
    private static float[][] split(float[] v, int B, int T, int w) {
        float[][] out = {new float[B * T * w], new float[B * T * w]};
        for (int b = 0; b < B; b++)
            for (int k = 0; k < 2; k++)
                System.arraycopy(v, (b * 2 * T + k * T) * w, out[k], b * T * w, T * w);
        return out;
    }

    // ---------------------------------------------------------------- behaviour

    /** Without state gradients the start state is a constant; reading its gradient is refused. */
    @Test
    void stateGradientsAreOffByDefaultAndChecked() {
        Random rng = new Random(SEED + 3);
        try (MambaModel model = mamba1(rng, 3, 4); Trainer t = Trainer.builder(model).batch(2).seqLen(4).build();
             MambaState other = model.newState(3)) {
            assertFalse(t.stateGradients());
            t.forward(TestUtil.random(rng, 2 * 4 * 3, 1));
            t.backward(TestUtil.random(rng, 2 * 4 * 8, 1), BackwardOptions.accumulate());
            assertThrows(IllegalStateException.class, t::startStateGradient);
            t.setStateGradients(true);
            assertThrows(IllegalStateException.class, t::startStateGradient, "no backward since they were turned on");
            assertThrows(IllegalArgumentException.class, () -> t.setEndStateGradient(other), "3 rows for a batch of 2");
            assertThrows(IllegalArgumentException.class, () -> t.readStartStateGradient(other));
            t.forward(TestUtil.random(rng, 2 * 4 * 3, 1));
            t.backward(TestUtil.random(rng, 2 * 4 * 8, 1), BackwardOptions.accumulate());
            float[] g = t.startStateGradient();
            double norm = 0;
            for (float v : g) norm += v * v;
            assertTrue(norm > 0, "a zero start state still has a non-zero gradient");
        }
    }

    /**
     * Turning state gradients on changes no weight gradient (bit for bit: the backward only also writes what its carries
     * hold past step 0), for both architectures and for a language model's stepTokens, whose start state then has a
     * non-zero gradient too.
     */
    @Test
    void stateGradientsLeaveTheWeightGradientsBitIdentical() {
        for (int arch = 0; arch < 3; arch++) {
            List<List<float[]>> runs = new ArrayList<>();
            for (boolean on : new boolean[] {false, true}) {
                Random rng = new Random(SEED + 5);
                MambaModel m = arch == 0 ? mamba1(rng, 3, 4) : arch == 1 ? mamba3(rng, 3, 4)
                        : MambaModel.builder(Mamba1Config.builder().dModel(8).dState(4).layers(2).build()).vocabSize(11).seed(4).build();
                try (m; Trainer t = Trainer.builder(m).batch(2).seqLen(7).build();
                     MambaState s0 = stateOf(m, 2, randomStart(rng, m, 2))) {
                    t.setStateGradients(on);
                    t.startFrom(s0);
                    if (arch < 2) {
                        t.forward(TestUtil.random(rng, 2 * 7 * 3, 1));
                        t.backward(TestUtil.random(rng, 2 * 7 * 8, 1), BackwardOptions.accumulate());
                    } else {
                        int[] ids = new int[14], targets = new int[14];
                        for (int i = 0; i < 14; i++) {
                            ids[i] = rng.nextInt(11);
                            targets[i] = rng.nextInt(11);
                        }
                        t.stepTokens(ids, targets, BackwardOptions.accumulate());
                    }
                    List<float[]> g = new ArrayList<>();
                    for (String n : t.parameterNames()) g.add(t.gradient(n));
                    runs.add(g);
                    if (on) {
                        float[] ds = t.startStateGradient();
                        double norm = 0;
                        for (float v : ds) norm += v * v;
                        assertTrue(norm > 0, "arch " + arch + ": a non-zero start-state gradient");
                    }
                }
            }
            for (int i = 0; i < runs.get(0).size(); i++)
                org.junit.jupiter.api.Assertions.assertArrayEquals(runs.get(0).get(i), runs.get(1).get(i),
                        "arch " + arch + ", tensor " + i + " with state gradients on vs off");
        }
    }

    /**
     * The end-state gradient applies to one backward: the same forward and backward a second time, without it, gives
     * the gradients of ⟨out, P⟩ alone (equal to a trainer that never saw it).
     */
    @Test
    void theEndStateGradientAppliesOnce() {
        Random rng = new Random(SEED + 4);
        try (MambaModel model = mamba3(rng, 3, 4); Trainer t = Trainer.builder(model).batch(2).seqLen(6).build()) {
            float[] x = TestUtil.random(rng, 2 * 6 * 3, 1), P = TestUtil.random(rng, 2 * 6 * 8, 1);
            float[] s0 = randomStart(rng, model, 2);
            t.setStateGradients(true);
            float[] withQ = trainerGradients(model, t, 2, s0, x, P, TestUtil.random(rng, s0.length, 1));
            t.zeroGrad();
            try (MambaState start = stateOf(model, 2, s0)) {
                t.startFrom(start);
                t.forward(x);
                t.backward(P, BackwardOptions.accumulate());
                float[] without = t.startStateGradient();
                t.zeroGrad();
                t.startFrom(start);
                t.forward(x);
                t.backward(P, BackwardOptions.accumulate());
                org.junit.jupiter.api.Assertions.assertArrayEquals(without, t.startStateGradient());
                assertTrue(TestUtil.relL2(withQ, without) > 1e-3, "the seed changed the first backward's gradient");
            }
        }
    }
}
