package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Mamba-3 SISO on a CUDA device against the double reference ({@link Mamba3Reference}) and against the CPU
 * backend. Skipped where no CUDA device is usable.
 *
 * <p>Tolerances: F32 storage as on the CPU ({@link Mamba3StepTest}: outputs rel L2 1e-5, states 1e-5, angles
 * 1e-4 rad); TF32 products (10-bit mantissa) rel L2 {@value #TF32_TOL}; BF16 / F16 weight matrices compared with
 * the reference evaluated on the same rounded weights (so only the device's low-precision arithmetic counts):
 * rel L2 {@value #BF16_TOL} / {@value #F16_TOL}. CUDA graphs decode equals eager decode bit for bit. CUDA
 * gradients against the reference: rel L2 1e-4 per tensor (as {@link Mamba3GradientTest}); CPU↔GPU training:
 * cosine ≥ 0.9999 and rel L2 < 1e-4 per gradient, weights after 20 AdamW steps rel L2 < 1e-3, GPU reruns bit
 * for bit.
 */
@Tag("gpu")
class Mamba3GpuTest {
    private static final long SEED = 20260314L;
    static final double TF32_TOL = 5e-3, BF16_TOL = 2e-2, F16_TOL = 4e-3;

    @BeforeAll
    static void needsGpu() {
        Assumptions.assumeTrue(Device.cudaCount() > 0, () -> "no CUDA device: " + Device.cudaUnavailableReason());
    }

    /** A CUDA model (dtype) holding the CPU model's weights. */
    private static MambaModel onGpu(MambaModel cpu, DType dtype) {
        MambaModel.Builder b = MambaModel.builder(cpu.config()).device(Device.cuda(0)).dtype(dtype);
        if (cpu.vocabSize() > 0) b.vocabSize(cpu.vocabSize()).tieEmbeddings(cpu.tieEmbeddings());
        else b.inputDim(cpu.inputDim());
        MambaModel g = b.build();
        try {
            for (String n : cpu.parameterNames()) g.setParameter(n, cpu.getParameter(n));
        } catch (RuntimeException e) {
            g.close();
            throw e;
        }
        return g;
    }

    static double cosine(float[] a, float[] b) {
        return TrainerGpuTest.cosine(a, b);
    }

    // ---------------------------------------------------------------- inference

    /** Steps, sequence forward (T around 64 and a long 600) and split prefill of every shape, F32, from random states. */
    @Test
    void f32MatchesTheDoubleReference() {
        Random rng = new Random(SEED);
        List<String> report = new ArrayList<>();
        for (Mamba3StepTest.Shape sh : Mamba3StepTest.shapes()) {
            int B = 2;
            try (MambaModel cpu = sh.build(rng); MambaModel m = onGpu(cpu, DType.F32)) {
                Mamba3Reference ref = new Mamba3Reference(m);
                int o = ref.outputWidth();
                try (MambaState s = m.newState(B)) {  // decode steps from a random state
                    double[][] rs = Mamba3StepTest.randomState(rng, ref, s);
                    double worst = 0;
                    for (int t = 0; t < 24; t++) {
                        float[] x = Mamba3StepTest.inputs(rng, m, B, 1);
                        int[] id = Mamba3StepTest.ids(rng, m, B, 1);
                        double e = TestUtil.relL2(Mamba3StepTest.step(m, s, x, id), ref.step(x, id, rs));
                        worst = Math.max(worst, e);
                        assertTrue(e < Mamba3StepTest.OUT_TOL, sh.name() + ": GPU step " + t + " rel L2 " + e);
                    }
                    Mamba3StepTest.assertState(sh.name() + ": GPU steps", ref, s, rs, Mamba3StepTest.STATE_TOL,
                            Mamba3StepTest.ANGLE_TOL);
                    report.add(String.format("%-70s steps worst %.2e", sh.name(), worst));
                }
                for (int T : new int[] {1, 63, 64, 65, 130, 600}) {
                    if (sh != Mamba3StepTest.MID && T != 130) continue;  // every T on one shape, T 130 on all
                    float[] x = Mamba3StepTest.inputs(rng, m, B, T);
                    int[] ids = Mamba3StepTest.ids(rng, m, B, T);
                    try (MambaState sf = m.newState(B); MambaState sp = m.newState(B)) {
                        double[][] rs = Mamba3StepTest.randomState(rng, ref, sf);
                        sp.copyFrom(sf);
                        float[] y = Mamba3StepTest.forward(m, sf, x, ids, B, T);
                        double[] want = ref.forward(x == null ? null : Mamba3Reference.toDouble(x), ids, B, T, rs);
                        double e = TestUtil.relL2(y, want), worst = Mamba3StepTest.worstPosition(y, want, B, T, o);
                        String what = sh.name() + ", T " + T;
                        assertTrue(e < Mamba3StepTest.OUT_TOL && worst < Mamba3StepTest.OUT_TOL,
                                what + ": GPU forward rel L2 " + e + ", worst position " + worst);
                        Mamba3StepTest.assertState(what + ": GPU forward", ref, sf, rs, Mamba3StepTest.STATE_TOL,
                                Mamba3StepTest.ANGLE_TOL);
                        // Split prefill with the carried state.
                        int T1 = T / 3 + 1, T2 = T - T1;
                        if (T2 > 0) {
                            Mamba3StepTest.prefill(m, sp, slice(x, B, T, m, 0, T1), sliceIds(ids, B, T, 0, T1), T1);
                            float[] last = Mamba3StepTest.prefill(m, sp, slice(x, B, T, m, T1, T2), sliceIds(ids, B, T, T1, T2), T2);
                            double es = TestUtil.relL2(last, Mamba3StepTest.sliceD(want, B, T, o, T - 1, 1));
                            assertTrue(es < Mamba3StepTest.OUT_TOL, what + ": GPU split prefill rel L2 " + es);
                            Mamba3StepTest.assertState(what + ": GPU split prefill", ref, sp, rs, Mamba3StepTest.STATE_TOL,
                                    Mamba3StepTest.ANGLE_TOL);
                        }
                        report.add(String.format("%-70s T %3d forward %.2e worst position %.2e", sh.name(), T, e, worst));
                    }
                }
            }
        }
        System.out.println("Mamba-3 GPU F32 vs double reference:\n  " + String.join("\n  ", report));
    }

    private static float[] slice(float[] x, int B, int T, MambaModel m, int t0, int n) {
        return x == null ? null : Mamba3StepTest.slice(x, B, T, m.inputWidth(), t0, n);
    }

    private static int[] sliceIds(int[] ids, int B, int T, int t0, int n) {
        return ids == null ? null : Mamba3StepTest.slice(ids, B, T, t0, n);
    }

    /** Rounds to the nearest bfloat16 (ties to even), returned as float. */
    static float toBf16(float f) {
        int bits = Float.floatToRawIntBits(f);
        bits = (bits + 0x7FFF + ((bits >>> 16) & 1)) & 0xFFFF0000;
        return Float.intBitsToFloat(bits);
    }

    /** Rounds to the nearest IEEE half (ties to even), returned as float; the values here are far inside its range. */
    static float toF16(float f) {
        float a = Math.abs(f);
        if (a < 0x1p-14f) return (float) (Math.rint(f * 0x1p24) * 0x1p-24);  // subnormal halves: multiples of 2^-24
        int bits = Float.floatToRawIntBits(f);
        bits = (bits + 0xFFF + ((bits >>> 13) & 1)) & 0xFFFFE000;
        return Float.intBitsToFloat(bits);
    }

    /**
     * TF32, BF16 and F16: steps and a forward of 130 from a random state. BF16/F16 weights are first rounded to the
     * storage type in Java, so the reference sees exactly the stored weights.
     */
    @Test
    void lowPrecisionAgainstTheReferenceOnTheStoredWeights() {
        Random rng = new Random(SEED + 1);
        List<String> report = new ArrayList<>();
        for (Mamba3StepTest.Shape sh : List.of(Mamba3StepTest.DEFAULT_HEAD, Mamba3StepTest.MID, Mamba3StepTest.shapes().get(6))) {
            for (DType dt : new DType[] {DType.TF32, DType.BF16, DType.F16}) {
                double tol = dt == DType.TF32 ? TF32_TOL : dt == DType.BF16 ? BF16_TOL : F16_TOL;
                try (MambaModel cpu = sh.build(rng)) {
                    if (dt != DType.TF32) {
                        for (String n : cpu.parameterNames()) {
                            float[] v = cpu.getParameter(n);
                            for (int i = 0; i < v.length; i++) v[i] = dt == DType.BF16 ? toBf16(v[i]) : toF16(v[i]);
                            cpu.setParameter(n, v);
                        }
                    }
                    try (MambaModel m = onGpu(cpu, dt); MambaState s = m.newState(2); MambaState sf = m.newState(2)) {
                        Mamba3Reference ref = new Mamba3Reference(cpu);
                        int B = 2, T = 130;
                        double[][] rs = Mamba3StepTest.randomState(rng, ref, s);
                        sf.copyFrom(s);
                        double[][] rf = Mamba3Reference.copy(rs);
                        double worst = 0;
                        for (int t = 0; t < 32; t++) {
                            float[] x = Mamba3StepTest.inputs(rng, m, B, 1);
                            int[] id = Mamba3StepTest.ids(rng, m, B, 1);
                            worst = Math.max(worst, TestUtil.relL2(Mamba3StepTest.step(m, s, x, id), ref.step(x, id, rs)));
                        }
                        float[] x = Mamba3StepTest.inputs(rng, m, B, T);
                        int[] ids = Mamba3StepTest.ids(rng, m, B, T);
                        double ef = TestUtil.relL2(Mamba3StepTest.forward(m, sf, x, ids, B, T),
                                ref.forward(x == null ? null : Mamba3Reference.toDouble(x), ids, B, T, rf));
                        String line = String.format("%-70s %-4s steps worst %.2e, forward T %d %.2e (bound %.0e)", sh.name(), dt,
                                worst, T, ef, tol);
                        report.add(line);
                        assertTrue(worst < tol && ef < tol, line + "\n" + String.join("\n", report));
                    }
                }
            }
        }
        System.out.println("Mamba-3 GPU low precision vs double reference on the stored weights:\n  " + String.join("\n  ", report));
    }

    @Test
    void cudaGraphDecodeEqualsEagerBitForBit() {
        Random rng = new Random(SEED + 2);
        for (DType dt : new DType[] {DType.F32, DType.BF16}) {
            for (int batch : new int[] {3, 12}) {
                try (MambaModel cpu = Mamba3StepTest.MID.build(rng); MambaModel eager = onGpu(cpu, dt);
                     MambaModel graph = onGpu(cpu, dt); MambaState se = eager.newState(batch);
                     MambaState sg = graph.newState(batch)) {
                    graph.setCudaGraphs(true);
                    assertTrue(graph.cudaGraphs());
                    Mamba3Reference ref = new Mamba3Reference(cpu);
                    for (int b = 0; b < batch; b++) {
                        float[] row = ref.randomStateRow(rng, 0.5);
                        se.writeRow(b, row);
                        sg.writeRow(b, row);
                    }
                    for (int t = 0; t < 100; t++) {
                        float[] x = TestUtil.random(rng, batch * eager.inputWidth(), 1);
                        assertArrayEquals(eager.step(se, x), graph.step(sg, x), dt + " B=" + batch + " step " + t);
                    }
                    for (int b = 0; b < batch; b++) assertArrayEquals(se.readRow(b), sg.readRow(b), dt + " state row " + b);
                }
            }
        }
    }

    @Test
    void batchRowsAreIndependent() {
        Random rng = new Random(SEED + 3);
        int B = 4, T = 130;
        try (MambaModel cpu = Mamba3StepTest.MID.build(rng); MambaModel m = onGpu(cpu, DType.F32);
             MambaState big = m.newState(B); MambaState one = m.newState(1)) {
            Mamba3Reference ref = new Mamba3Reference(cpu);
            Mamba3StepTest.randomState(rng, ref, big);
            one.writeRow(0, big.readRow(0));
            int w = m.inputWidth(), o = m.outputWidth();
            float[] x = TestUtil.random(rng, B * T * w, 1);
            float[] yb = m.forward(big, x, B, T), y1 = m.forward(one, Arrays.copyOf(x, T * w), 1, T);
            double e = TestUtil.relL2(y1, Arrays.copyOf(yb, T * o));
            assertTrue(e < 1e-6, "GPU forward: row 0 of B=4 vs B=1 rel L2 " + e);
            for (int t = 0; t < 10; t++) {
                float[] xt = TestUtil.random(rng, B * w, 1);
                double es = TestUtil.relL2(m.step(one, Arrays.copyOf(xt, w)), Arrays.copyOf(m.step(big, xt), o));
                assertTrue(es < 1e-6, "GPU step " + t + ": row 0 of B=4 vs B=1 rel L2 " + es);
            }
        }
    }

    // ---------------------------------------------------------------- training

    /** The CPU gradient cases on the GPU (F32), plus a long sequence (T 256) for a chunked training path. */
    @Test
    void cudaGradientsMatchTheDoubleReference() {
        Random rng = new Random(SEED + 4);
        List<Mamba3GradientTest.Case> cases = new ArrayList<>(Mamba3GradientTest.cases());
        cases.add(new Mamba3GradientTest.Case("d_model 32, headdim 16, d_state 16, ngroups 2, inputDim 4, chunk 64, T 256",
                Mamba3Config.builder().dModel(32).headdim(16).dState(16).ngroups(2).layers(2).build(), 4, 2, 256, 5, false));
        for (Mamba3GradientTest.Case k : cases) {
            try (MambaModel cpu = Mamba3ReferenceTest.model(k.c(), k.inputDim(), 0, false, rng);
                 MambaModel m = onGpu(cpu, DType.F32);
                 Trainer t = Trainer.builder(m).batch(k.B()).seqLen(k.T()).build()) {
                Mamba3GradientTest.checkCase(k, m, t, rng);
            }
        }
    }

    /** GPU vs CPU training: forward, every gradient, then 20 AdamW steps; for T 64 and T 256. */
    @Test
    void trainingMatchesTheCpu() {
        Mamba3Config c = Mamba3Config.builder().dModel(32).dState(16).headdim(8).ngroups(2).layers(2).build();
        for (int T : new int[] {64, 256}) {
            int B = 2, IN = 4;
            Random rng = new Random(SEED + 5 + T);
            try (MambaModel cpu = Mamba3ReferenceTest.model(c, IN, 0, false, rng); MambaModel gpu = onGpu(cpu, DType.F32);
                 Trainer tc = Trainer.builder(cpu).batch(B).seqLen(T).adamW(AdamW.ofLearningRate(1e-3).weightDecay(0.01))
                         .clipGradNorm(1.0).build();
                 Trainer tg = Trainer.builder(gpu).batch(B).seqLen(T).adamW(AdamW.ofLearningRate(1e-3).weightDecay(0.01))
                         .clipGradNorm(1.0).build()) {
                float[] x = TestUtil.random(rng, B * T * IN, 1), P = TestUtil.random(rng, B * T * 32, 1);
                double fwd = TestUtil.relL2(tg.forward(x), tc.forward(x));
                assertTrue(fwd < 1e-5, "T " + T + ": training forward GPU vs CPU rel L2 " + fwd);
                tc.backward(P, BackwardOptions.accumulate());
                tg.backward(P, BackwardOptions.accumulate());
                List<String> report = new ArrayList<>();
                for (String n : tc.parameterNames()) assertClose("T " + T + " " + n, tg.gradient(n), tc.gradient(n), 0.9999, 1e-4, report);
                assertClose("T " + T + " input", tg.inputGradient(), tc.inputGradient(), 0.9999, 1e-4, report);
                tc.zeroGrad();
                tg.zeroGrad();
                double worstLoss = 0;
                for (int k = 0; k < 20; k++) {
                    float[] xs = TestUtil.random(rng, B * T * IN, 1), target = TestUtil.random(rng, B * T * 32, 1);
                    StepResult rc = tc.stepMse(xs, target), rg = tg.stepMse(xs, target);
                    worstLoss = Math.max(worstLoss, Math.abs(rg.loss() - rc.loss()) / rc.loss());
                }
                assertTrue(worstLoss < 1e-4, "T " + T + ": MSE loss GPU vs CPU over 20 steps, worst rel " + worstLoss);
                for (String n : cpu.parameterNames())
                    assertClose("T " + T + " weights " + n, gpu.getParameter(n), cpu.getParameter(n), 0.999, 1e-3, report);
                System.out.println("Mamba-3 GPU vs CPU training, T " + T + ":\n  " + String.join("\n  ", report));
            }
        }
    }

    private static void assertClose(String what, float[] got, float[] want, double minCos, double maxRel, List<String> report) {
        double cos = cosine(got, want), rel = TestUtil.relL2(got, want);
        report.add(String.format("%-55s cos %.8f  rel %.2e", what, cos, rel));
        assertTrue(cos >= minCos && rel < maxRel, what + ": cosine " + cos + ", rel L2 " + rel + "\n" + String.join("\n", report));
    }

    private static List<float[]> gpuRun() {
        Mamba3Config c = Mamba3Config.builder().dModel(32).dState(16).headdim(8).layers(2).build();
        int B = 4, T = 80, IN = 6, V = 7;
        List<float[]> out = new ArrayList<>();
        try (MambaModel m = MambaModel.builder(c).inputDim(IN).seed(11).device(Device.cuda(0)).build();
             Trainer t = Trainer.builder(m).batch(B).seqLen(T).adamW(AdamW.ofLearningRate(3e-3).weightDecay(0.1))
                     .clipGradNorm(0.5).crossEntropyHead(V).headSeed(3).build()) {
            Random rng = new Random(5);
            int[] targets = new int[B * T];
            for (int i = 0; i < targets.length; i++) targets[i] = i % 5 == 0 ? Trainer.DEFAULT_IGNORE_INDEX : rng.nextInt(V);
            List<StepResult> rs = new ArrayList<>();
            rs.add(t.step(TestUtil.random(rng, B * T * IN, 1), TestUtil.random(rng, B * T * 32, 0.01)));
            rs.add(t.stepCrossEntropy(TestUtil.random(rng, B * T * IN, 1), targets));
            rs.add(t.stepMse(TestUtil.random(rng, B * T * IN, 1), TestUtil.random(rng, B * T * 32, 1)));
            for (String n : m.parameterNames()) out.add(m.getParameter(n));
            out.add(t.head().weight());
            out.add(t.inputGradient());
            float[] r = new float[rs.size() * 2];
            for (int i = 0; i < rs.size(); i++) {
                r[2 * i] = (float) rs.get(i).loss();
                r[2 * i + 1] = (float) rs.get(i).gradNorm();
            }
            out.add(r);
        }
        return out;
    }

    @Test
    void gpuTrainingRunsAreBitIdentical() {
        List<float[]> a = gpuRun(), b = gpuRun();
        assertEquals(a.size(), b.size());
        for (int i = 0; i < a.size(); i++) assertArrayEquals(a.get(i), b.get(i), "item " + i + " differs between GPU runs");
    }
}
