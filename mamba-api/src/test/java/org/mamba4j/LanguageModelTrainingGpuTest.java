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
 * Language-model training ({@link Trainer#stepTokens}) on the CUDA backend against the CPU backend (whose
 * gradients {@link LanguageModelTrainingTest} checks against double references), Mamba-1 and Mamba-3, tied and
 * untied heads. Same weights and tokens on both. F32: the loss (rel < 1e-5) and every tensor's gradient, the
 * embedding included (cosine ≥ 0.9999 and rel L2 < 1e-4 per tensor); weights after 5 AdamW steps (rel L2 < 1e-3);
 * bit-identical GPU reruns; a task learned on the GPU. BF16 storage (bf16 forward products, f32 masters and
 * backward): the loss within rel 2e-2 and every gradient at cosine ≥ 0.99 of the F32 GPU run, weights after 5
 * steps within rel L2 2e-2. One case has V = 20000 and 900 rows, so the head's loss runs in two blocks.
 * Skipped where no CUDA device is usable.
 */
@Tag("gpu")
class LanguageModelTrainingGpuTest {
    private static final long SEED = 20260402L;

    @BeforeAll
    static void needsGpu() {
        Assumptions.assumeTrue(Device.cudaCount() > 0, () -> "no CUDA device: " + Device.cudaUnavailableReason());
    }

    record Kind(String name, ModelConfig c, int vocab, boolean tied, int B, int T) {}

    static List<Kind> kinds() {
        ModelConfig m1 = Mamba1Config.builder().dModel(32).dState(8).layers(2).build();
        ModelConfig m3 = Mamba3Config.builder().dModel(32).headdim(16).dState(16).layers(2).build();
        return List.of(new Kind("Mamba-1 tied V=37", m1, 37, true, 3, 40),
                new Kind("Mamba-1 untied V=37", m1, 37, false, 3, 40),
                new Kind("Mamba-3 tied V=37", m3, 37, true, 3, 40),
                new Kind("Mamba-3 untied V=37", m3, 37, false, 3, 40),
                new Kind("Mamba-1 untied V=20000 (two head blocks)", m1, 20000, false, 2, 450));
    }

    /** A model with random weights on `device` in `dtype`, or a copy of `weights` when not null. */
    static MambaModel model(Kind k, Device device, DType dtype, MambaModel weights, long seed) {
        MambaModel m = MambaModel.builder(k.c).vocabSize(k.vocab).tieEmbeddings(k.tied).seed(seed).device(device).dtype(dtype)
                .build();
        try {
            if (weights != null) {
                for (String n : weights.parameterNames()) m.setParameter(n, weights.getParameter(n));
            } else if (k.c instanceof Mamba3Config) {
                Mamba3Reference.randomize(m, new Random(seed));
            } else {
                TestUtil.randomizeWeights(m, new Random(seed));
            }
            return m;
        } catch (RuntimeException e) {
            m.close();
            throw e;
        }
    }

    static int[][] tokens(Random rng, Kind k) {
        return LanguageModelTrainingTest.tokens(rng, k.B, k.T, k.vocab, Trainer.DEFAULT_IGNORE_INDEX);
    }

    static void assertClose(String what, float[] got, float[] want, double minCos, double maxRel, List<String> report) {
        double cos = TrainerGpuTest.cosine(got, want), rel = TestUtil.relL2(got, want);
        report.add(String.format("%-50s cos %.8f  rel %.2e", what, cos, rel));
        assertTrue(cos >= minCos && rel < maxRel, what + ": cosine " + cos + ", rel L2 " + rel + "\n" + String.join("\n", report));
    }

    @Test
    void lossAndEveryGradientMatchTheCpu() {
        List<String> report = new ArrayList<>();
        for (Kind k : kinds()) {
            Random rng = new Random(SEED);
            try (MambaModel cpu = model(k, Device.cpu(), DType.F32, null, SEED);
                 MambaModel gpu = model(k, Device.cuda(0), DType.F32, cpu, SEED);
                 Trainer tc = Trainer.builder(cpu).batch(k.B).seqLen(k.T).build();
                 Trainer tg = Trainer.builder(gpu).batch(k.B).seqLen(k.T).build()) {
                int[][] tk = tokens(rng, k);
                StepResult rc = tc.stepTokens(tk[0], tk[1], BackwardOptions.accumulate());
                StepResult rg = tg.stepTokens(tk[0], tk[1], BackwardOptions.accumulate());
                double rel = Math.abs(rg.loss() - rc.loss()) / rc.loss();
                report.add(String.format("%-50s loss GPU %.7f CPU %.7f rel %.2e", k.name, rg.loss(), rc.loss(), rel));
                assertTrue(rel < 1e-5, k.name + ": loss GPU " + rg.loss() + " vs CPU " + rc.loss());
                for (String n : tc.parameterNames())
                    assertClose(k.name + " " + n, tg.gradient(n), tc.gradient(n), 0.9999, 1e-4, report);
            }
        }
        System.out.println("LM training GPU vs CPU (F32):\n  " + String.join("\n  ", report));
    }

    @Test
    void fiveAdamWStepsTrackTheCpuAndGpuRerunsAreBitIdentical() {
        for (Kind k : kinds().subList(0, 4)) {
            List<String> report = new ArrayList<>();
            try (MambaModel cpu = model(k, Device.cpu(), DType.F32, null, SEED + 1);
                 MambaModel gpu = model(k, Device.cuda(0), DType.F32, cpu, SEED + 1);
                 MambaModel gpu2 = model(k, Device.cuda(0), DType.F32, cpu, SEED + 1)) {
                AdamW opt = AdamW.ofLearningRate(1e-3).weightDecay(0.1);
                try (Trainer tc = Trainer.builder(cpu).batch(k.B).seqLen(k.T).adamW(opt).clipGradNorm(1.0).build();
                     Trainer tg = Trainer.builder(gpu).batch(k.B).seqLen(k.T).adamW(opt).clipGradNorm(1.0).build();
                     Trainer tg2 = Trainer.builder(gpu2).batch(k.B).seqLen(k.T).adamW(opt).clipGradNorm(1.0).build()) {
                    Random rng = new Random(SEED + 1);
                    for (int s = 0; s < 5; s++) {
                        int[][] tk = tokens(rng, k);
                        tc.stepTokens(tk[0], tk[1]);
                        tg.stepTokens(tk[0], tk[1]);
                        tg2.stepTokens(tk[0], tk[1]);
                    }
                }
                for (String n : cpu.parameterNames()) {
                    assertClose(k.name + " " + n, gpu.getParameter(n), cpu.getParameter(n), 0.999, 1e-3, report);
                    assertArrayEquals(gpu.getParameter(n), gpu2.getParameter(n), k.name + " " + n + ": GPU rerun");
                }
            }
        }
    }

    @Test
    void bf16StorageTracksF32() {
        for (Kind k : kinds().subList(0, 4)) {
            List<String> report = new ArrayList<>();
            try (MambaModel f32 = model(k, Device.cuda(0), DType.F32, null, SEED + 2);
                 MambaModel bf16 = model(k, Device.cuda(0), DType.BF16, f32, SEED + 2);
                 Trainer t32 = Trainer.builder(f32).batch(k.B).seqLen(k.T).adamW(AdamW.ofLearningRate(1e-3)).build();
                 Trainer t16 = Trainer.builder(bf16).batch(k.B).seqLen(k.T).adamW(AdamW.ofLearningRate(1e-3)).build()) {
                Random rng = new Random(SEED + 2);
                int[][] tk = tokens(rng, k);
                StepResult r32 = t32.stepTokens(tk[0], tk[1], BackwardOptions.accumulate());
                StepResult r16 = t16.stepTokens(tk[0], tk[1], BackwardOptions.accumulate());
                double rel = Math.abs(r16.loss() - r32.loss()) / r32.loss();
                assertTrue(rel < 2e-2, k.name + ": bf16 loss " + r16.loss() + " vs f32 " + r32.loss());
                for (String n : t32.parameterNames())
                    assertClose(k.name + " " + n, t16.gradient(n), t32.gradient(n), 0.99, 1, report);
                t32.zeroGrad();
                t16.zeroGrad();
                for (int s = 0; s < 5; s++) {
                    tk = tokens(rng, k);
                    t32.stepTokens(tk[0], tk[1]);
                    t16.stepTokens(tk[0], tk[1]);
                }
                for (String n : f32.parameterNames())
                    assertClose(k.name + " weights " + n, bf16.getParameter(n), f32.getParameter(n), 0.99, 2e-2, report);
                System.out.println("BF16 vs F32 LM training (GPU), " + k.name + ":\n  " + String.join("\n  ", report));
            }
        }
    }

    @Test
    void aTinyLanguageModelLearnsOnTheGpu() {
        int V = 16, B = 8, T = 16;
        Random rng = new Random(SEED + 3);
        try (MambaModel model = MambaModel.builder(Mamba1Config.builder().dModel(32).dState(8).layers(2).build())
                .vocabSize(V).seed(3).device(Device.cuda(0)).build();
             Trainer trainer = Trainer.builder(model).batch(B).seqLen(T).adamW(AdamW.ofLearningRate(1e-2).weightDecay(0))
                     .clipGradNorm(1.0).build()) {
            for (int step = 0; step < 300; step++) {
                int[][] tk = LanguageModelTrainingTest.permutationTask(rng, B, T, V);
                StepResult r = trainer.stepTokens(tk[0], tk[1]);
                if (step > 50 && r.accuracy() == 1.0) break;
            }
            int[][] test = LanguageModelTrainingTest.permutationTask(new Random(SEED + 99), B, T, V);
            StepResult eval = trainer.evaluateTokens(test[0], test[1]);
            assertTrue(eval.accuracy() > 0.99, "held-out accuracy " + eval.accuracy());
        }
    }
}
