package org.mamba4j.parallel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.mamba4j.AdamW;
import org.mamba4j.BackwardOptions;
import org.mamba4j.Device;
import org.mamba4j.GemmMode;
import org.mamba4j.Mamba1Config;
import org.mamba4j.Mamba3Config;
import org.mamba4j.MambaModel;
import org.mamba4j.ModelConfig;
import org.mamba4j.StepResult;
import org.mamba4j.Trainer;

/**
 * Data-parallel training on one GPU (what a single H200 allows): NCCL with world size 1 (in-process and through the
 * TCP bootstrap), two replicas on one GPU over the in-process communicator bit-identical to one GPU trainer under
 * the rank-order definition, and the attempt of two NCCL ranks on one GPU (NCCL normally refuses them: the test then
 * reports that as skipped, with NCCL's words). Needs a CUDA device and libnccl.so.2; skipped otherwise.
 */
@Tag("gpu")
class NcclCommunicatorGpuTest {
    private static final int B = 4, T = 32, IN = 8;
    private static final Mamba1Config M1 = Mamba1Config.builder().dModel(64).dState(16).layers(2).build();
    private static final Mamba3Config M3 = Mamba3Config.builder().dModel(64).headdim(16).dState(16).layers(2).build();

    @BeforeAll
    static void needsGpuAndNccl() {
        Assumptions.assumeTrue(Device.cudaCount() > 0, () -> "no CUDA device: " + Device.cudaUnavailableReason());
        String why = NcclCommunicator.unavailableReason();
        Assumptions.assumeTrue(why == null, () -> "NCCL unavailable: " + why);
    }

    private static MambaModel model(ModelConfig c, long seed) {
        return MambaModel.builder(c).inputDim(IN).seed(seed).device(Device.cuda(0)).build();
    }

    private static Trainer trainer(MambaModel m) {
        return Trainer.builder(m).batch(B).seqLen(T).gemmMode(GemmMode.DETERMINISTIC)
                .adamW(AdamW.ofLearningRate(3e-3).weightDecay(0.01)).clipGradNorm(0.2).build();
    }

    private static float[] random(long seed, int n) {
        Random rng = new Random(seed);
        float[] a = new float[n];
        for (int i = 0; i < n; i++) a[i] = (float) rng.nextGaussian();
        return a;
    }

    private static float[] inputs(int k, int r) { return random(100L * k + r, B * T * IN); }
    private static float[] targets(int k, int r, int d) { return random(90_000L + 100L * k + r, B * T * d); }

    /** One GPU trainer under the definition: each shard's gradient from zero, summed in rank order, one step. */
    private static StepResult referenceStep(Trainer t, int k, int n) {
        List<float[]> g = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            t.zeroGrad();
            t.stepMse(inputs(k, r), targets(k, r, t.outputWidth()), BackwardOptions.accumulate().scale(1.0 / n));
            g.add(t.gradients());
        }
        t.setGradients(DataParallelDeterminismTest.rankOrderSum(g));
        return t.optimizerStep();
    }

    private static StepResult dpStep(DataParallelTrainer dp, int k, int n, int d) {
        List<float[]> xs = new ArrayList<>(), ys = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            xs.add(inputs(k, r));
            ys.add(targets(k, r, d));
        }
        return dp.stepMse(DataParallelDeterminismTest.concat(xs), DataParallelDeterminismTest.concat(ys));
    }

    /** Runs the data-parallel job of `replicas` against the one-trainer reference for 3 steps, bitwise. */
    private static void assertMatchesReference(ModelConfig c, List<Trainer> replicas, DataParallelTrainer dp) {
        int n = replicas.size();
        try (MambaModel refModel = model(c, 7); Trainer ref = trainer(refModel)) {
            for (int k = 0; k < 3; k++) {
                StepResult want = referenceStep(ref, k, n), got = dpStep(dp, k, n, refModel.outputWidth());
                assertEquals(want.gradNorm(), got.gradNorm(), 0.0, "step " + k);
                for (Trainer t : replicas)
                    DataParallelDeterminismTest.assertSameWeights(ref, t, "step " + k + " rank " + replicas.indexOf(t));
            }
        }
    }

    @Test
    void ncclWorldOfOneOnOneGpu() {
        for (Reduction red : Reduction.values())
            try (MambaModel m = model(M1, 7); Trainer t = trainer(m)) {
                List<NcclCommunicator> g = NcclCommunicator.group(List.of(Device.cuda(0)), Duration.ofSeconds(60));
                try (DataParallelTrainer dp = DataParallelTrainer.of(List.of(t), g, red)) {
                    assertEquals(red, dp.reduction());
                    assertArrayEquals(new double[] {1.5, -2}, g.get(0).allGather(new double[] {1.5, -2}));
                    float[] b = {3, 4};
                    g.get(0).broadcast(b, 0);
                    assertArrayEquals(new float[] {3, 4}, b);
                    assertMatchesReference(M1, List.of(t), dp);
                } finally {
                    g.forEach(NcclCommunicator::close);
                }
            }
    }

    @Test
    void ncclWorldOfOneThroughTheTcpBootstrap() throws Exception {
        LaunchConfig launch = new LaunchConfig(0, 1, 0, "127.0.0.1", CommunicatorTest.freePort(), Duration.ofSeconds(60));
        try (MambaModel m = model(M3, 7); Trainer t = trainer(m);
             NcclCommunicator c = NcclCommunicator.connect(launch, launch.localDevice());
             DataParallelTrainer dp = DataParallelTrainer.of(t, c)) {
            assertEquals(Reduction.RANK_ORDER, dp.reduction());
            assertMatchesReference(M3, List.of(t), dp);
        }
    }

    @Test
    void aRankThatNeverJoinsFailsTheNcclBootstrap() throws Exception {
        LaunchConfig launch = new LaunchConfig(0, 2, 0, "127.0.0.1", CommunicatorTest.freePort(), Duration.ofSeconds(2));
        long t0 = System.nanoTime();
        CommunicatorException e = assertThrows(CommunicatorException.class, () -> NcclCommunicator.connect(launch, Device.cuda(0)));
        assertTrue(e.getMessage().contains("ranks [1] did not join"), e.getMessage());
        assertTrue((System.nanoTime() - t0) / 1_000_000 < 20_000);
    }

    /** The in-process (host-staged) form with two replicas on one GPU: bit-identical to one GPU trainer. */
    @Test
    void twoReplicasOnOneGpuInProcessMatchOneTrainer() {
        List<MambaModel> models = new ArrayList<>();
        List<Trainer> replicas = new ArrayList<>();
        try {
            for (int r = 0; r < 2; r++) {
                models.add(model(M1, 7 + r));
                replicas.add(trainer(models.get(r)));
            }
            try (DataParallelTrainer dp = DataParallelTrainer.inProcess(replicas)) {
                assertMatchesReference(M1, replicas, dp);
            }
        } finally {
            replicas.forEach(Trainer::close);
            models.forEach(MambaModel::close);
        }
    }

    /**
     * Two NCCL ranks on one GPU: NCCL normally refuses a communicator with two ranks on one device ("Duplicate GPU
     * detected"); then this test is skipped with NCCL's message. If it is allowed, the device rank-order kernel must
     * give the same bits as the host fold (the in-process reference).
     */
    @Test
    void twoNcclRanksOnOneGpuIfNcclAllowsIt() throws Exception {
        List<NcclCommunicator> g;
        ExecutorService watchdog = Executors.newSingleThreadExecutor();
        try {
            Future<List<NcclCommunicator>> f = watchdog.submit(
                    () -> NcclCommunicator.group(List.of(Device.cuda(0), Device.cuda(0)), Duration.ofSeconds(30)));
            g = f.get(60, TimeUnit.SECONDS);
        } catch (java.util.concurrent.ExecutionException e) {
            Assumptions.abort("NCCL refused two ranks on one GPU: " + e.getCause().getMessage());
            return;
        } finally {
            watchdog.shutdownNow();
        }
        List<MambaModel> models = new ArrayList<>();
        List<Trainer> replicas = new ArrayList<>();
        try {
            for (int r = 0; r < 2; r++) {
                models.add(model(M1, 7 + r));
                replicas.add(trainer(models.get(r)));
            }
            try (DataParallelTrainer dp = DataParallelTrainer.of(replicas, g, Reduction.RANK_ORDER)) {
                assertMatchesReference(M1, replicas, dp);
            }
        } finally {
            replicas.forEach(Trainer::close);
            models.forEach(MambaModel::close);
            g.forEach(NcclCommunicator::close);
        }
    }
}
