package org.mamba4j.parallel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.mamba4j.AdamW;
import org.mamba4j.BackwardOptions;
import org.mamba4j.GemmMode;
import org.mamba4j.LossScaler;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.StepResult;
import org.mamba4j.Trainer;

/** The data-parallel trainer's contract beyond the plain step: accumulation, non-finite losses, checkpoints, failures, checks. */
class DataParallelTrainerTest {
    private static final Mamba1Config CONFIG = Mamba1Config.builder().dModel(16).dState(4).layers(2).build();
    private static final int B = 2, T = 8, IN = 3, D = 16;
    private final List<MambaModel> models = new ArrayList<>();
    private final List<Trainer> trainers = new ArrayList<>();

    @AfterEach
    void close() {
        trainers.forEach(Trainer::close);
        models.forEach(MambaModel::close);
    }

    private Trainer replica(long seed, int batch) {
        MambaModel m = MambaModel.builder(CONFIG).inputDim(IN).seed(seed).build();
        models.add(m);
        Trainer t = Trainer.builder(m).batch(batch).seqLen(T).gemmMode(GemmMode.DETERMINISTIC)
                .adamW(AdamW.ofLearningRate(3e-3)).clipGradNorm(0.3).build();
        trainers.add(t);
        return t;
    }

    private List<Trainer> replicas(int n) {
        List<Trainer> r = new ArrayList<>();
        for (int i = 0; i < n; i++) r.add(replica(3 + i, B));
        return r;
    }

    private static float[] random(long seed, int n) {
        Random rng = new Random(seed);
        float[] a = new float[n];
        for (int i = 0; i < n; i++) a[i] = (float) rng.nextGaussian();
        return a;
    }

    private static float[] x(long k, int rows) { return random(k, rows * T * IN); }
    private static float[] y(long k, int rows) { return random(10_000 + k, rows * T * D); }

    private static float[] rows(float[] a, int from, int count, int perRow) {
        float[] out = new float[count * perRow];
        System.arraycopy(a, from * perRow, out, 0, out.length);
        return out;
    }

    @Test
    void wrongBatchLengthsAreRefused() {
        try (DataParallelTrainer dp = DataParallelTrainer.inProcess(replicas(2))) {
            assertEquals(2 * B, dp.localBatch());
            assertEquals(2 * B, dp.globalBatch());
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> dp.stepMse(x(0, B), y(0, B)));
            assertTrue(e.getMessage().contains("localBatch (4)"), e.getMessage());
            assertEquals(0, dp.stepCount(), "nothing ran");
        }
    }

    @Test
    void replicasOfDifferentShapesCannotJoin() {
        List<Trainer> r = List.of(replica(1, B), replica(2, B + 1));
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> DataParallelTrainer.inProcess(r));
        assertTrue(e.getMessage().contains("batch"), e.getMessage());
    }

    /** Two accumulated micro-batches per rank, then a step: each rank's accumulation, folded in rank order. */
    @Test
    void accumulationThenStepFoldsEachRanksAccumulatedGradient() {
        List<Trainer> r = replicas(2);
        Trainer ref = replica(3, B);
        try (DataParallelTrainer dp = DataParallelTrainer.inProcess(r)) {
            for (int step = 0; step < 2; step++) {
                float[] x0 = x(10 * step, 2 * B), y0 = y(10 * step, 2 * B), x1 = x(10 * step + 1, 2 * B), y1 = y(10 * step + 1, 2 * B);
                StepResult a = dp.stepMse(x0, y0, BackwardOptions.accumulate().scale(0.5));
                assertFalse(a.optimizerStepped());
                StepResult s = dp.stepMse(x1, y1, BackwardOptions.step().scale(0.5));
                assertTrue(s.optimizerStepped());
                List<float[]> g = new ArrayList<>();
                for (int rank = 0; rank < 2; rank++) {
                    ref.zeroGrad();
                    BackwardOptions micro = BackwardOptions.accumulate().scale(0.25);  // 0.5 / world
                    ref.stepMse(rows(x0, rank * B, B, T * IN), rows(y0, rank * B, B, T * D), micro);
                    ref.stepMse(rows(x1, rank * B, B, T * IN), rows(y1, rank * B, B, T * D), micro);
                    g.add(ref.gradients());
                }
                ref.setGradients(DataParallelDeterminismTest.rankOrderSum(g));
                StepResult want = ref.optimizerStep();
                assertEquals(want.gradNorm(), s.gradNorm(), 0.0);
                for (Trainer t : r) DataParallelDeterminismTest.assertSameWeights(ref, t, "step " + step);
            }
        }
    }

    @Test
    void aNonFiniteLossOnOneRankSkipsTheStepOnEveryRank() {
        List<Trainer> r = replicas(2);
        try (DataParallelTrainer dp = DataParallelTrainer.inProcess(r)) {
            float[] before = r.get(0).model().getParameter("backbone.layers.0.mixer.in_proj.weight");
            float[] xs = x(1, 2 * B);
            xs[B * T * IN + 5] = Float.NaN;  // in rank 1's shard only
            StepResult s = dp.stepMse(xs, y(1, 2 * B));
            assertTrue(s.skipped(), s.toString());
            assertEquals(0, dp.stepCount());
            for (Trainer t : r) {
                assertArrayEquals(before, t.model().getParameter("backbone.layers.0.mixer.in_proj.weight"));
                assertEquals(0, t.stepCount());
            }
            StepResult ok = dp.stepMse(x(2, 2 * B), y(2, 2 * B));  // training goes on, replicas still equal
            assertTrue(ok.optimizerStepped() && !ok.skipped());
            DataParallelDeterminismTest.assertSameWeights(r.get(0), r.get(1), "after the skipped step");
        }
    }

    /** With a loss scaler, a non-finite loss on one rank backs the scale off on every rank, as on one trainer. */
    @Test
    void aNonFiniteLossBacksTheLossScaleOffOnEveryRank() {
        List<Trainer> r = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            MambaModel m = MambaModel.builder(CONFIG).inputDim(IN).seed(3 + i).build();
            models.add(m);
            Trainer t = Trainer.builder(m).batch(B).seqLen(T).lossScaler(LossScaler.dynamic().withInitScale(1024)).build();
            trainers.add(t);
            r.add(t);
        }
        try (DataParallelTrainer dp = DataParallelTrainer.inProcess(r)) {
            float[] xs = x(1, 2 * B);
            xs[3] = Float.POSITIVE_INFINITY;  // in rank 0's shard only
            assertTrue(dp.stepMse(xs, y(1, 2 * B)).skipped());
            for (Trainer t : r) assertEquals(512, t.lossScale(), 0.0, "backed off by the default factor 0.5");
            StepResult ok = dp.stepMse(x(2, 2 * B), y(2, 2 * B));
            assertTrue(ok.optimizerStepped());
            assertEquals(512, ok.lossScale(), 0.0);
            DataParallelDeterminismTest.assertSameWeights(r.get(0), r.get(1), "after the backed-off step");
        }
    }

    /** Replicas with an output head of width 3 and a loss scaler whose scale grows every step (checkpoint contents). */
    private List<Trainer> headAndScalerReplicas(int n) {
        List<Trainer> r = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            MambaModel m = MambaModel.builder(CONFIG).inputDim(IN).seed(3 + i).build();
            models.add(m);
            Trainer t = Trainer.builder(m).batch(B).seqLen(T).gemmMode(GemmMode.DETERMINISTIC).adamW(AdamW.ofLearningRate(3e-3))
                    .outputHead(3).headSeed(4 + i).lossScaler(LossScaler.dynamic().withInitScale(64).withGrowth(2, 1)).build();
            trainers.add(t);
            r.add(t);
        }
        return r;
    }

    private static float[] y3(long k) { return random(20_000 + k, 2 * B * T * 3); }

    /**
     * Save, train on, load: the weights, head and loss scale come back, and the resumed run repeats an uninterrupted
     * one bit for bit.
     */
    @Test
    void checkpointRoundTripResumesBitForBit(@TempDir Path dir) {
        List<Trainer> r = headAndScalerReplicas(2);
        try (DataParallelTrainer dp = DataParallelTrainer.inProcess(r)) {
            dp.stepMse(x(1, 2 * B), y3(1));
            Path first = dp.saveCheckpoint(dir);
            dp.stepMse(x(2, 2 * B), y3(2));
            List<float[]> atStep2 = new ArrayList<>();
            for (String n : dp.model().parameterNames()) atStep2.add(dp.model().getParameter(n));
            float[] headAtStep2 = r.get(0).head().weight();
            double scaleAtStep2 = r.get(0).lossScale();
            assertEquals(256, scaleAtStep2, 0.0, "the scale grew twice");
            dp.saveCheckpoint(dir);
            assertEquals("step-2", DataParallelTrainer.latestCheckpoint(dir).getFileName().toString());
            assertFalse(first.toFile().exists(), "older checkpoints are deleted");
            // train past it, then load it back: the weights, head, moments, step count and loss scale of step 2
            dp.stepMse(x(3, 2 * B), y3(3));
            assertEquals(2, dp.loadCheckpoint(dir));
            for (Trainer t : r) {
                assertEquals(2, t.stepCount());
                assertEquals(scaleAtStep2, t.lossScale(), 0.0);
                assertArrayEquals(headAtStep2, t.head().weight());
                int i = 0;
                for (String n : t.model().parameterNames()) assertArrayEquals(atStep2.get(i++), t.model().getParameter(n), n);
            }
            // the resumed step 3 equals a fresh job's step 3
            StepResult resumed = dp.stepMse(x(3, 2 * B), y3(3));
            List<Trainer> fresh = headAndScalerReplicas(2);
            try (DataParallelTrainer again = DataParallelTrainer.inProcess(fresh)) {
                for (int k = 1; k <= 3; k++) again.stepMse(x(k, 2 * B), y3(k));
                DataParallelDeterminismTest.assertSameWeights(fresh.get(0), r.get(0), "resumed vs uninterrupted");
                assertEquals(fresh.get(0).lossScale(), r.get(0).lossScale(), 0.0);
                assertEquals(3, resumed.step());
            }
        }
    }

    /** A replica that fails (its trainer closed) fails the call at once, not after the timeout, and the trainer stays failed. */
    @Test
    void aFailingReplicaStopsTheOthersAtOnce() {
        List<Trainer> r = replicas(3);
        try (DataParallelTrainer dp = DataParallelTrainer.inProcess(r, Duration.ofMinutes(5))) {
            r.get(1).close();
            long t0 = System.nanoTime();
            RuntimeException e = assertThrows(RuntimeException.class, () -> dp.stepMse(x(1, 3 * B), y(1, 3 * B)));
            assertTrue(e instanceof IllegalStateException && e.getMessage().contains("closed"), e.toString());
            assertTrue((System.nanoTime() - t0) / 1_000_000 < 30_000);
            IllegalStateException again = assertThrows(IllegalStateException.class, () -> dp.stepMse(x(1, 3 * B), y(1, 3 * B)));
            assertTrue(again.getMessage().contains("failed earlier"), again.getMessage());
        }
    }
}
