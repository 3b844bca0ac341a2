package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * State carry with gradients on the CUDA backend against the CPU backend (whose gradients are checked against
 * central differences in {@link StateCarryTest}), F32, same weights and data: from a random start state with an
 * end-state gradient Q, the start-state gradient and every weight's and the input's gradient (cosine ≥ 0.9999,
 * rel L2 < 1e-4 per tensor), for Mamba-1 (CUDA scan and conv backward) and Mamba-3 (the sequential backward,
 * including a shape that without state gradients takes the chunked backward: chunk 64, T 96); bit-identical GPU
 * reruns; two carried windows equal one backward through time on the GPU too. Skipped where no CUDA device is usable.
 */
@Tag("gpu")
class StateCarryGpuTest {
    private static final long SEED = 20261202L;
    private static final double MIN_COS = 0.9999, MAX_REL = 1e-4;

    @BeforeAll
    static void needsGpu() {
        Assumptions.assumeTrue(Device.cudaCount() > 0, () -> "no CUDA device: " + Device.cudaUnavailableReason());
    }

    record Case(String name, ModelConfig c, int inputDim, int B, int T) {}

    static List<Case> cases() {
        return List.of(
                new Case("Mamba-1 d_model 16, d_conv 4, T 70 (two scan chunks)",
                        Mamba1Config.builder().dModel(16).dState(8).dConv(4).expand(2).layers(2).build(), 3, 2, 70),
                new Case("Mamba-1 d_model 16, d_conv 4, T 2 (< d_conv − 1)",
                        Mamba1Config.builder().dModel(16).dState(16).dConv(4).expand(2).layers(1).build(), 3, 3, 2),
                new Case("Mamba-3 d_model 16, headdim 8, d_state 8, ngroups 2, gate norm, chunk 8, T 20",
                        Mamba3Config.builder().dModel(16).headdim(8).dState(8).ngroups(2).outprojNorm(true).layers(2)
                                .chunkSize(8).build(), 3, 2, 20),
                new Case("Mamba-3 d_model 32, headdim 16, d_state 16, chunk 64, T 96 (the chunked backward's shape)",
                        Mamba3Config.builder().dModel(32).headdim(16).dState(16).layers(1).build(), 4, 2, 96));
    }

    private static MambaModel build(Case k, Device device, long seed) {
        return MambaModel.builder(k.c).inputDim(k.inputDim).seed(seed).device(device).build();
    }

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

    /** Every gradient (weights, input, start state) of L = ⟨out, P⟩ + ⟨end, Q⟩ from s0. */
    private static List<float[]> gradients(MambaModel m, int B, int T, float[] s0, float[] x, float[] P, float[] Q) {
        List<float[]> out = new ArrayList<>();
        try (Trainer t = Trainer.builder(m).batch(B).seqLen(T).build(); MambaState start = stateOf(m, B, s0);
             MambaState q = stateOf(m, B, Q)) {
            t.setStateGradients(true);
            t.startFrom(start);
            out.add(t.forward(x));
            t.setEndStateGradient(q);
            t.backward(P, BackwardOptions.accumulate());
            for (String n : m.parameterNames()) out.add(t.gradient(n));
            out.add(t.inputGradient());
            out.add(t.startStateGradient());
        }
        return out;
    }

    @Test
    void cudaStateGradientsMatchTheCpu() {
        Random rng = new Random(SEED);
        for (Case k : cases()) {
            long seed = rng.nextLong();
            try (MambaModel cpu = build(k, Device.cpu(), seed); MambaModel gpu = build(k, Device.cuda(0), seed)) {
                if (k.c instanceof Mamba3Config) Mamba3Reference.randomize(cpu, rng);
                else TestUtil.randomizeWeights(cpu, rng);
                for (String n : cpu.parameterNames()) gpu.setParameter(n, cpu.getParameter(n));
                int B = k.B, T = k.T, D = k.c.dModel();
                float[] s0 = StateCarryTest.randomStart(rng, cpu, B);
                float[] x = TestUtil.random(rng, B * T * cpu.inputWidth(), 1);
                float[] P = TestUtil.random(rng, B * T * D, 1);
                float[] Q = TestUtil.random(rng, s0.length, 1);
                List<float[]> want = gradients(cpu, B, T, s0, x, P, Q);
                List<float[]> got = gradients(gpu, B, T, s0, x, P, Q);
                List<String> names = new ArrayList<>();
                names.add("forward");
                names.addAll(cpu.parameterNames());
                names.add("input");
                names.add("start state");
                List<String> report = new ArrayList<>();
                for (int i = 0; i < names.size(); i++) {
                    double cos = TrainerGpuTest.cosine(got.get(i), want.get(i)), rel = TestUtil.relL2(got.get(i), want.get(i));
                    report.add(String.format("%-45s cos %.8f  rel %.2e", names.get(i), cos, rel));
                    assertTrue(cos >= MIN_COS && rel < MAX_REL, k.name + ": " + names.get(i) + ": cosine " + cos
                            + ", rel L2 " + rel + "\n  " + String.join("\n  ", report));
                }
                System.out.println("state carry, CUDA vs CPU, " + k.name + ":\n  " + String.join("\n  ", report));
                List<float[]> again = gradients(gpu, B, T, s0, x, P, Q);
                for (int i = 0; i < got.size(); i++)
                    assertArrayEquals(got.get(i), again.get(i), k.name + ": " + names.get(i) + " differs between GPU runs");
            }
        }
    }

    /** Two windows with the state and its gradient carried equal one backward over both, on the GPU. */
    @Test
    void cudaTwoWindowsEqualOneBackwardThroughTime() {
        Random rng = new Random(SEED + 1);
        for (Case k : List.of(cases().get(0), cases().get(2))) {
            try (MambaModel m = build(k, Device.cuda(0), rng.nextLong())) {
                int B = k.B, T = k.T / 2, w = m.inputWidth(), D = k.c.dModel();
                float[] s0 = StateCarryTest.randomStart(rng, m, B);
                float[] x = TestUtil.random(rng, B * 2 * T * w, 1), P = TestUtil.random(rng, B * 2 * T * D, 1);
                float[] x1 = new float[B * T * w], x2 = new float[B * T * w], p1 = new float[B * T * D], p2 = new float[B * T * D];
                for (int b = 0; b < B; b++) {
                    System.arraycopy(x, b * 2 * T * w, x1, b * T * w, T * w);
                    System.arraycopy(x, (b * 2 * T + T) * w, x2, b * T * w, T * w);
                    System.arraycopy(P, b * 2 * T * D, p1, b * T * D, T * D);
                    System.arraycopy(P, (b * 2 * T + T) * D, p2, b * T * D, T * D);
                }
                List<float[]> full = new ArrayList<>(), win = new ArrayList<>();
                try (Trainer t = Trainer.builder(m).batch(B).seqLen(2 * T).build(); MambaState s = stateOf(m, B, s0)) {
                    t.setStateGradients(true);
                    t.startFrom(s);
                    t.forward(x);
                    t.backward(P, BackwardOptions.accumulate());
                    for (String n : m.parameterNames()) full.add(t.gradient(n));
                    full.add(t.startStateGradient());
                }
                try (Trainer t = Trainer.builder(m).batch(B).seqLen(T).build(); MambaState s = stateOf(m, B, s0);
                     MambaState s1 = m.newState(B); MambaState ds1 = m.newState(B)) {
                    t.setStateGradients(true);
                    t.startFrom(s);
                    t.forward(x1);
                    t.readEndState(s1);
                    t.startFrom(s1);
                    t.forward(x2);
                    t.backward(p2, BackwardOptions.accumulate());
                    t.readStartStateGradient(ds1);
                    t.startFrom(s);
                    t.forward(x1);
                    t.setEndStateGradient(ds1);
                    t.backward(p1, BackwardOptions.accumulate());
                    for (String n : m.parameterNames()) win.add(t.gradient(n));
                    win.add(t.startStateGradient());
                }
                for (int i = 0; i < full.size(); i++) {
                    double rel = TestUtil.relL2(win.get(i), full.get(i));
                    assertTrue(rel < 1e-5, k.name + ": tensor " + i + " two windows vs one: rel L2 " + rel);
                }
            }
        }
    }
}
