package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.function.IntFunction;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * Whole-step CUDA graphs ({@link Trainer#setStepGraphs}): twin trainers on the same weights and data, one eager and
 * one replaying its captured step, must agree bit for bit — every loss, gradient norm and step count, and every
 * weight after the steps — for the MSE backbone and the language model (Mamba-1 and Mamba-3), F32 and BF16, with
 * clipping active, a learning-rate change between steps (read from device memory at each replay) and a skipped
 * step (a NaN target: the graph's own decision). Skipped where no CUDA device is usable.
 */
@Tag("gpu")
class StepGraphGpuTest {
    @BeforeAll
    static void needsGpu() {
        Assumptions.assumeTrue(Device.cudaCount() > 0, () -> "no CUDA device: " + Device.cudaUnavailableReason());
    }

    private static final Mamba1Config CONFIG = Mamba1Config.builder().dModel(32).dState(16).layers(2).build();
    private static final int B = 3, T = 130;  // T ≥ 128: the chunked training scan and the grouped backward

    private static final ModelConfig MAMBA3 = Mamba3Config.builder().dModel(32).headdim(16).dState(16).layers(2).build();

    private static MambaModel model(DType dtype, int vocab) {
        return model(CONFIG, dtype, vocab);
    }

    private static MambaModel model(ModelConfig config, DType dtype, int vocab) {
        MambaModel.Builder b = MambaModel.builder(config).seed(11).device(Device.cuda(0)).dtype(dtype);
        return vocab > 0 ? b.vocabSize(vocab).build() : b.inputDim(8).build();
    }

    private static Trainer trainer(MambaModel m, boolean graphs) {
        return Trainer.builder(m).batch(B).seqLen(T).adamW(AdamW.ofLearningRate(3e-3).weightDecay(0.01)).clipGradNorm(0.05)
                .stepGraphs(graphs).build();
    }

    private static void assertSameState(MambaModel a, MambaModel b, Trainer ta, Trainer tb) {
        for (String n : a.parameterNames()) assertArrayEquals(a.getParameter(n), b.getParameter(n), "weight " + n);
        assertEquals(ta.stepCount(), tb.stepCount(), "step count");
    }

    @ParameterizedTest
    @EnumSource(value = DType.class, names = {"F32", "BF16"})
    void mseStepsReplayBitForBit(DType dtype) {
        Random rng = new Random(5);
        try (MambaModel ma = model(dtype, 0); MambaModel mb = model(dtype, 0);
             Trainer eager = trainer(ma, false); Trainer graphed = trainer(mb, true)) {
            assertTrue(graphed.stepGraphs());
            for (int step = 0; step < 6; step++) {
                float[] x = new float[B * T * 8], y = new float[B * T * 32];
                for (int i = 0; i < x.length; i++) x[i] = (float) rng.nextGaussian();
                for (int i = 0; i < y.length; i++) y[i] = (float) rng.nextGaussian();
                if (step == 4) y[7] = Float.NaN;  // a diverged step: skipped by the device's decision
                if (step == 3) {
                    eager.setLearningRate(1e-3);
                    graphed.setLearningRate(1e-3);
                }
                StepResult a = eager.stepMse(x, y), b = graphed.stepMse(x, y);
                assertEquals(a.toString(), b.toString(), "step " + step);
                assertEquals(Double.doubleToRawLongBits(a.gradNorm()), Double.doubleToRawLongBits(b.gradNorm()), "norm " + step);
                assertEquals(step == 4, b.skipped(), "step " + step + " skipped");
            }
            assertEquals("", graphed.stepGraphsOffReason());
            assertSameState(ma, mb, eager, graphed);
        }
    }

    @ParameterizedTest
    @EnumSource(value = DType.class, names = {"F32", "BF16"})
    void lmStepsReplayBitForBit(DType dtype) {
        lmSteps(CONFIG, dtype);
    }

    @ParameterizedTest
    @EnumSource(value = DType.class, names = {"F32", "BF16"})
    void mamba3LmStepsReplayBitForBit(DType dtype) {
        lmSteps(MAMBA3, dtype);
    }

    private static void lmSteps(ModelConfig config, DType dtype) {
        final int vocab = 97;
        Random rng = new Random(6);
        try (MambaModel ma = model(config, dtype, vocab); MambaModel mb = model(config, dtype, vocab);
             Trainer eager = trainer(ma, false); Trainer graphed = trainer(mb, true)) {
            for (int step = 0; step < 5; step++) {
                int[] ids = new int[B * T], targets = new int[B * T];
                for (int i = 0; i < ids.length; i++) {
                    ids[i] = rng.nextInt(vocab);
                    targets[i] = rng.nextInt(vocab);
                }
                StepResult a = eager.stepTokens(ids, targets), b = graphed.stepTokens(ids, targets);
                assertEquals(a.toString(), b.toString(), "step " + step);
                assertEquals(Double.doubleToRawLongBits(a.loss()), Double.doubleToRawLongBits(b.loss()), "loss " + step);
            }
            assertEquals("", graphed.stepGraphsOffReason());
            assertSameState(ma, mb, eager, graphed);
        }
    }
    /**
     * Two models, each with a graphed trainer, stepped from two threads at once (captures and replays interleaving on
     * the device), must end bit for bit where an eager twin of each, stepped alone, ends.
     */
    @org.junit.jupiter.api.Test
    void twoGraphedTrainersOnTwoThreadsMatchTheirEagerTwins() throws Exception {
        final int vocab = 97, steps = 5;
        IntFunction<int[][]> batches = seed -> {
            Random rng = new Random(seed);
            int[][] d = new int[2 * steps][B * T];
            for (int[] row : d) for (int i = 0; i < row.length; i++) row[i] = rng.nextInt(vocab);
            return d;
        };
        ExecutorService pool = Executors.newFixedThreadPool(2);
        try (MambaModel g0 = model(DType.BF16, vocab); MambaModel g1 = model(MAMBA3, DType.F32, vocab);
             MambaModel e0 = model(DType.BF16, vocab); MambaModel e1 = model(MAMBA3, DType.F32, vocab);
             Trainer tg0 = trainer(g0, true); Trainer tg1 = trainer(g1, true);
             Trainer te0 = trainer(e0, false); Trainer te1 = trainer(e1, false)) {
            int[][] d0 = batches.apply(21), d1 = batches.apply(22);
            Future<?> f0 = pool.submit(() -> { for (int s = 0; s < steps; s++) tg0.stepTokens(d0[2 * s], d0[2 * s + 1]); });
            Future<?> f1 = pool.submit(() -> { for (int s = 0; s < steps; s++) tg1.stepTokens(d1[2 * s], d1[2 * s + 1]); });
            f0.get();
            f1.get();
            for (int s = 0; s < steps; s++) te0.stepTokens(d0[2 * s], d0[2 * s + 1]);
            for (int s = 0; s < steps; s++) te1.stepTokens(d1[2 * s], d1[2 * s + 1]);
            assertEquals("", tg0.stepGraphsOffReason());
            assertEquals("", tg1.stepGraphsOffReason());
            assertSameState(g0, e0, tg0, te0);
            assertSameState(g1, e1, tg1, te1);
        } finally {
            pool.shutdownNow();
        }
    }
}
