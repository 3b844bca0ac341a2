package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * Mamba-3 SISO inference on the CPU backend (F32) against the independent double reference
 * ({@link Mamba3Reference}, itself checked in {@link Mamba3ReferenceTest}), and the identities between the
 * entry points: steps, sequence forward, prefill, split prefill with a carried non-zero state (S, k_prev,
 * v_prev and angles near 2π), chunk boundaries (T = 1, 63, 64, 65, 130 around the chunk of 64), batch-row
 * independence and reset.
 *
 * <p>Tolerances (f32 storage and arithmetic vs double): outputs rel L2 {@value #OUT_TOL} per step or over a
 * whole [B, T] sequence; states rel L2 {@value #STATE_TOL} over S, K, V and a circular distance of
 * {@value #ANGLE_TOL} rad for the angles (an f32 angle is rounded at every step: ≈ 4e-7 rad each, a random walk
 * of a few 1e-6 rad over 130 steps). Identities between two f32 paths of the same math: {@value #SAME_TOL}.
 */
class Mamba3StepTest {
    static final long SEED = 20260312L;
    static final double OUT_TOL = 1e-5, STATE_TOL = 1e-5, ANGLE_TOL = 1e-4, SAME_TOL = 1e-5;

    record Shape(String name, Mamba3Config c, int inputDim, int vocab, boolean tie) {
        MambaModel build(Random rng) {
            return Mamba3ReferenceTest.model(c, inputDim, vocab, tie, rng);
        }
    }

    /** The official default head (d_state 128, headdim 64, 32 angles) at d_model 128. */
    static final Shape DEFAULT_HEAD = new Shape("default head d_state 128 headdim 64, d_model 128, inputDim 16",
            Mamba3Config.builder().dModel(128).layers(2).build(), 16, 0, false);
    /** A mid-size shape with two groups. */
    static final Shape MID = new Shape("d_model 32, d_state 16, headdim 8, ngroups 2, inputDim 4",
            Mamba3Config.builder().dModel(32).dState(16).headdim(8).ngroups(2).layers(2).build(), 4, 0, false);

    static List<Shape> shapes() {
        return List.of(
                DEFAULT_HEAD,
                MID,
                new Shape("headdim 8, d_state 6 (1 angle), ngroups 2, inputDim 5",
                        Mamba3Config.builder().dModel(16).dState(6).headdim(8).ngroups(2).layers(2).build(), 5, 0, false),
                new Shape("rope_fraction 1, outprojNorm, no input projection",
                        Mamba3Config.builder().dModel(32).dState(16).headdim(16).ropeFraction(1.0).outprojNorm(true)
                                .layers(2).build(), 0, 0, false),
                new Shape("d_state 3 (no angle), headdim 4, expand 1",
                        Mamba3Config.builder().dModel(16).expand(1).dState(3).headdim(4).layers(1).build(), 3, 0, false),
                new Shape("language model, tied head, vocab 37",
                        Mamba3Config.builder().dModel(32).dState(16).headdim(8).layers(2).build(), 0, 37, true),
                new Shape("language model, untied head, vocab 37, outprojNorm, ngroups 2",
                        Mamba3Config.builder().dModel(32).dState(16).headdim(8).ngroups(2).outprojNorm(true).layers(2)
                                .build(), 0, 37, false));
    }

    // ---------------------------------------------------------------- helpers

    /** Random inputs [B, T, inputWidth], or null for a language model. */
    static float[] inputs(Random rng, MambaModel m, int B, int T) {
        return m.vocabSize() > 0 ? null : TestUtil.random(rng, B * T * m.inputWidth(), 1);
    }

    static int[] ids(Random rng, MambaModel m, int B, int T) {
        if (m.vocabSize() == 0) return null;
        int[] ids = new int[B * T];
        for (int i = 0; i < ids.length; i++) ids[i] = rng.nextInt(m.vocabSize());
        return ids;
    }

    /** Positions [t0, t0 + n) of a [B, T, w] array, as [B, n, w]. */
    static float[] slice(float[] x, int B, int T, int w, int t0, int n) {
        float[] out = new float[B * n * w];
        for (int b = 0; b < B; b++) System.arraycopy(x, (b * T + t0) * w, out, b * n * w, n * w);
        return out;
    }

    static int[] slice(int[] x, int B, int T, int t0, int n) {
        int[] out = new int[B * n];
        for (int b = 0; b < B; b++) System.arraycopy(x, b * T + t0, out, b * n, n);
        return out;
    }

    static double[] sliceD(double[] x, int B, int T, int w, int t0, int n) {
        double[] out = new double[B * n * w];
        for (int b = 0; b < B; b++) System.arraycopy(x, (b * T + t0) * w, out, b * n * w, n * w);
        return out;
    }

    /** The model's every-position output [B, T, outputWidth] (logits for a language model), carrying `state`. */
    static float[] forward(MambaModel m, MambaState state, float[] x, int[] ids, int B, int T) {
        return m.vocabSize() > 0 ? m.forwardTokens(state, ids, B, T) : m.forward(state, x, B, T);
    }

    /** The model's last-position output [B, outputWidth], carrying `state`. */
    static float[] prefill(MambaModel m, MambaState state, float[] x, int[] ids, int T) {
        if (m.vocabSize() == 0) return m.prefill(state, x, T);
        float[] logits = new float[state.batch() * m.vocabSize()];
        m.prefillTokens(state, ids, T, logits);
        return logits;
    }

    static float[] step(MambaModel m, MambaState state, float[] x, int[] ids) {
        if (m.vocabSize() == 0) return m.step(state, x);
        float[] logits = new float[state.batch() * m.vocabSize()];
        m.stepTokens(state, ids, logits);
        return logits;
    }

    /** Random state rows written to the model's state; returns the same state in double for the reference. */
    static double[][] randomState(Random rng, Mamba3Reference ref, MambaState s) {
        double[][] d = new double[s.batch()][];
        for (int b = 0; b < s.batch(); b++) {
            float[] row = ref.randomStateRow(rng, 0.5);
            s.writeRow(b, row);
            d[b] = Mamba3Reference.toDouble(row);
        }
        return d;
    }

    /**
     * Asserts every row of the model state is within tolerance of the reference state; returns the worst
     * {rel L2 of S, K, V; circular angle distance} over the rows.
     */
    static double[] assertState(String what, Mamba3Reference ref, MambaState s, double[][] want, double stateTol, double angleTol) {
        double[] worst = new double[2];
        for (int b = 0; b < s.batch(); b++) {
            double[] e = ref.stateError(s.readRow(b), want[b]);
            assertTrue(e[0] < stateTol && e[1] < angleTol,
                    what + ": state row " + b + " rel L2 " + e[0] + " (S, K, V), max angle distance " + e[1] + " rad");
            worst[0] = Math.max(worst[0], e[0]);
            worst[1] = Math.max(worst[1], e[1]);
        }
        return worst;
    }

    /** The worst relative L2 error of one position's output over all (b, t) of [B, T, w]. */
    static double worstPosition(float[] got, double[] want, int B, int T, int w) {
        double worst = 0;
        for (int r = 0; r < B * T; r++) {
            float[] g = Arrays.copyOfRange(got, r * w, (r + 1) * w);
            double[] d = Arrays.copyOfRange(want, r * w, (r + 1) * w);
            worst = Math.max(worst, TestUtil.relL2(g, d));
        }
        return worst;
    }

    // ---------------------------------------------------------------- tests

    /** 24 decode steps (12 for the default head) of every shape, from zero, against the reference; then the state. */
    @Test
    void stepsMatchTheDoubleReferenceForEveryShape() {
        Random rng = new Random(SEED);
        List<String> report = new ArrayList<>();
        for (Shape sh : shapes()) {
            int B = 2, steps = sh == DEFAULT_HEAD ? 12 : 24;
            try (MambaModel m = sh.build(rng); MambaState s = m.newState(B)) {
                Mamba3Reference ref = new Mamba3Reference(m);
                assertEquals(ref.rowSize(), s.rowSize(), sh.name + ": state row size");
                double[][] rs = ref.zeroState(B);
                double worst = 0;
                for (int t = 0; t < steps; t++) {
                    float[] x = inputs(rng, m, B, 1);
                    int[] id = ids(rng, m, B, 1);
                    float[] y = step(m, s, x, id);
                    double[] want = ref.step(x, id, rs);
                    double e = TestUtil.relL2(y, want);
                    worst = Math.max(worst, e);
                    assertTrue(e < OUT_TOL, sh.name + ": step " + t + " rel L2 " + e);
                }
                double[] es = assertState(sh.name + " after " + steps + " steps", ref, s, rs, STATE_TOL, ANGLE_TOL);
                report.add(String.format("%-70s worst step rel L2 %.2e; state %.2e, angles %.2e rad", sh.name, worst, es[0], es[1]));
            }
        }
        System.out.println("Mamba-3 CPU steps vs double reference:\n  " + String.join("\n  ", report));
    }

    /**
     * The sequence forward over [B, T] from a random non-zero state, for T around the chunk of 64: every position
     * against the reference, the end state against the reference, prefill's last position and T single steps
     * against the forward.
     */
    @Test
    void sequenceForwardAroundChunkBoundariesFromANonZeroState() {
        Random rng = new Random(SEED + 1);
        List<String> report = new ArrayList<>();
        for (Shape sh : List.of(MID, DEFAULT_HEAD)) {
            int B = 2;
            try (MambaModel m = sh.build(rng)) {
                Mamba3Reference ref = new Mamba3Reference(m);
                int w = m.inputWidth(), o = m.outputWidth();
                for (int T : new int[] {1, 63, 64, 65, 130}) {
                    if (sh == DEFAULT_HEAD && T == 1) continue;
                    float[] x = inputs(rng, m, B, T);
                    try (MambaState sf = m.newState(B); MambaState sp = m.newState(B); MambaState ss = m.newState(B)) {
                        double[][] rs = randomState(rng, ref, sf);
                        sp.copyFrom(sf);
                        ss.copyFrom(sf);
                        float[] y = m.forward(sf, x, B, T);
                        double[] want = ref.forward(Mamba3Reference.toDouble(x), null, B, T, rs);
                        double all = TestUtil.relL2(y, want), worst = worstPosition(y, want, B, T, o);
                        String what = sh.name + ", T " + T;
                        assertTrue(all < OUT_TOL && worst < OUT_TOL,
                                what + ": forward vs reference rel L2 " + all + ", worst position " + worst);
                        double[] es = assertState(what + ", forward", ref, sf, rs, STATE_TOL, ANGLE_TOL);

                        float[] last = m.prefill(sp, x, T);
                        double ep = TestUtil.relL2(last, slice(y, B, T, o, T - 1, 1));
                        assertTrue(ep < SAME_TOL, what + ": prefill vs forward's last position rel L2 " + ep);
                        assertState(what + ", prefill", ref, sp, rs, STATE_TOL, ANGLE_TOL);

                        if (T <= 65) {
                            double worstStep = 0;
                            for (int t = 0; t < T; t++) {
                                float[] yt = m.step(ss, slice(x, B, T, w, t, 1));
                                worstStep = Math.max(worstStep, TestUtil.relL2(yt, slice(y, B, T, o, t, 1)));
                            }
                            assertTrue(worstStep < SAME_TOL, what + ": steps vs forward, worst rel L2 " + worstStep);
                        }
                        report.add(String.format("%-70s T %3d  forward rel L2 %.2e, worst position %.2e; state %.2e, angles %.2e rad",
                                sh.name, T, all, worst, es[0], es[1]));
                    }
                }
            }
        }
        System.out.println("Mamba-3 CPU sequence forward vs double reference:\n  " + String.join("\n  ", report));
    }

    /**
     * prefill(T1) then prefill(T2) with the carried state == prefill(T1 + T2), from a random non-zero incoming
     * state (all four parts, angles near 2π): outputs and end states against each other and the reference.
     */
    @Test
    void splitPrefillWithCarriedStateEqualsOnePrefill() {
        Random rng = new Random(SEED + 2);
        int B = 3;
        try (MambaModel m = MID.build(rng)) {
            Mamba3Reference ref = new Mamba3Reference(m);
            int w = m.inputWidth(), o = m.outputWidth();
            for (int[] split : new int[][] {{37, 30}, {64, 1}, {1, 64}, {63, 67}, {5, 3}}) {
                int T1 = split[0], T2 = split[1], T = T1 + T2;
                String what = "T1 " + T1 + " + T2 " + T2;
                float[] x = inputs(rng, m, B, T);
                try (MambaState one = m.newState(B); MambaState two = m.newState(B)) {
                    double[][] rs = randomState(rng, ref, one);
                    two.copyFrom(one);
                    float[] whole = m.prefill(one, x, T);
                    m.prefill(two, slice(x, B, T, w, 0, T1), T1);
                    float[] split2 = m.prefill(two, slice(x, B, T, w, T1, T2), T2);
                    double e = TestUtil.relL2(split2, whole);
                    assertTrue(e < SAME_TOL, what + ": split vs whole last output rel L2 " + e);
                    for (int b = 0; b < B; b++) {
                        double[] eb = ref.stateError(two.readRow(b), Mamba3Reference.toDouble(one.readRow(b)));
                        assertTrue(eb[0] < SAME_TOL && eb[1] < ANGLE_TOL, what + ": split vs whole state row " + b
                                + " rel L2 " + eb[0] + ", angle " + eb[1]);
                    }
                    double[] want = ref.forward(Mamba3Reference.toDouble(x), null, B, T, rs);
                    double er = TestUtil.relL2(whole, sliceD(want, B, T, o, T - 1, 1));
                    assertTrue(er < OUT_TOL, what + ": prefill vs reference rel L2 " + er);
                    assertState(what + ": split prefill vs reference", ref, two, rs, STATE_TOL, ANGLE_TOL);
                }
            }
        }
    }

    /** A language model's forwardTokens / prefillTokens / stepTokens from a random state against the reference. */
    @Test
    void languageModelsFromANonZeroState() {
        Random rng = new Random(SEED + 3);
        List<Shape> lms = shapes().stream().filter(s -> s.vocab > 0).toList();
        assertEquals(2, lms.size());
        for (Shape sh : lms) {
            int B = 2, T = 65;
            try (MambaModel m = sh.build(rng); MambaState sf = m.newState(B); MambaState sp = m.newState(B)) {
                Mamba3Reference ref = new Mamba3Reference(m);
                int V = m.vocabSize();
                int[] ids = ids(rng, m, B, T);
                double[][] rs = randomState(rng, ref, sf);
                sp.copyFrom(sf);
                float[] logits = m.forwardTokens(sf, ids, B, T);
                double[] want = ref.forward(null, ids, B, T, rs);
                double e = TestUtil.relL2(logits, want);
                assertTrue(e < OUT_TOL, sh.name + ": forwardTokens rel L2 " + e);
                assertState(sh.name + ", forwardTokens", ref, sf, rs, STATE_TOL, ANGLE_TOL);
                float[] last = prefill(m, sp, null, ids, T);
                assertTrue(TestUtil.relL2(last, slice(logits, B, T, V, T - 1, 1)) < SAME_TOL, sh.name + ": prefillTokens");
                int[] next = ids(rng, m, B, 1);
                double es = TestUtil.relL2(step(m, sp, null, next), ref.step(null, next, rs));
                assertTrue(es < OUT_TOL, sh.name + ": stepTokens after the prefill rel L2 " + es);
                // From zero without a state.
                double e0 = TestUtil.relL2(m.forwardTokens(null, ids, B, T), ref.forward(null, ids, B, T, ref.zeroState(B)));
                assertTrue(e0 < OUT_TOL, sh.name + ": forwardTokens from zero rel L2 " + e0);
            }
        }
    }

    /** Row 0 gives the same result alone (B = 1) as with two other random rows (B = 3), for forward and steps. */
    @Test
    void batchRowsAreIndependent() {
        Random rng = new Random(SEED + 4);
        int B = 3, T = 70;
        try (MambaModel m = MID.build(rng); MambaState big = m.newState(B); MambaState one = m.newState(1)) {
            Mamba3Reference ref = new Mamba3Reference(m);
            int w = m.inputWidth(), o = m.outputWidth();
            randomState(rng, ref, big);
            one.writeRow(0, big.readRow(0));
            float[] x = inputs(rng, m, B, T);
            float[] yb = m.forward(big, x, B, T), y1 = m.forward(one, slice3(x, T * w), 1, T);
            double e = TestUtil.relL2(y1, slice3(yb, T * o));
            // Same math; B·T and T rows may take different product kernels: equal to f32 rounding.
            assertTrue(e < 1e-6, "forward: row 0 of B=3 vs B=1 rel L2 " + e);
            assertTrue(TestUtil.relL2(one.readRow(0), big.readRow(0)) < 1e-6, "forward: end state of row 0");
            for (int t = 0; t < 10; t++) {
                float[] xt = inputs(rng, m, B, 1);
                float[] ys = m.step(big, xt), y0 = m.step(one, Arrays.copyOf(xt, w));
                double es = TestUtil.relL2(y0, Arrays.copyOf(ys, o));
                assertTrue(es < 1e-6, "step " + t + ": row 0 of B=3 vs B=1 rel L2 " + es);
            }
        }
    }

    private static float[] slice3(float[] x, int n) {
        return Arrays.copyOf(x, n);
    }

    /** Reset reproduces the outputs and states bit for bit; resetRow zeroes exactly one row. */
    @Test
    void resetReproduces() {
        Random rng = new Random(SEED + 5);
        int B = 2, T = 70;
        try (MambaModel m = MID.build(rng); MambaState s = m.newState(B)) {
            Mamba3Reference ref = new Mamba3Reference(m);
            float[] x = inputs(rng, m, B, T);
            float[] first = m.prefill(s, x, T);
            float[] row1 = s.readRow(1);
            float[] step1 = m.step(s, inputs(new Random(1), m, B, 1));
            s.reset();
            for (int b = 0; b < B; b++) assertArrayEquals(new float[s.rowSize()], s.readRow(b), "reset row " + b);
            assertArrayEquals(first, m.prefill(s, x, T), "prefill after reset");
            assertArrayEquals(row1, s.readRow(1), "state after reset and prefill");
            assertArrayEquals(step1, m.step(s, inputs(new Random(1), m, B, 1)), "step after reset and prefill");
            // A written random state, then resetRow(0): row 0 restarts from zero, row 1 keeps its state.
            double[][] rs = randomState(rng, ref, s);
            s.resetRow(0);
            rs[0] = new double[ref.rowSize()];
            float[] y = m.prefill(s, x, T);
            double[] want = ref.forward(Mamba3Reference.toDouble(x), null, B, T, rs);
            double e = TestUtil.relL2(y, sliceD(want, B, T, o(m), T - 1, 1));
            assertTrue(e < OUT_TOL, "prefill after resetRow(0) vs reference rel L2 " + e);
        }
    }

    private static int o(MambaModel m) {
        return m.outputWidth();
    }
}
