package org.mamba4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.mamba4j.AdamW;
import org.mamba4j.BackwardOptions;
import org.mamba4j.Device;
import org.mamba4j.GemmMode;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.StepResult;
import org.mamba4j.Trainer;

/**
 * What only a machine with several GPUs can run (issue 13, items 3 and 6): NCCL over every visible GPU, bit-identical
 * to one GPU trainer under the rank-order definition, and the scaling table (printed, never asserted) for 130m- and
 * 1.4b-shaped backbones at 1, 2, 4, 8 GPUs with the same per-GPU batch. Skipped with fewer than two GPUs or no NCCL.
 * Run: {@code mvn test -pl mamba-api -Dtest=DataParallelMultiGpuTest}; {@code -Dmamba4j.dp.scaling=true} adds the table.
 */
@Tag("gpu")
class DataParallelMultiGpuTest {
    @BeforeAll
    static void needsGpus() {
        Assumptions.assumeTrue(Device.cudaCount() >= 2, () -> "needs at least 2 CUDA devices, found " + Device.cudaCount());
        String why = NcclCommunicator.unavailableReason();
        Assumptions.assumeTrue(why == null, () -> "NCCL unavailable: " + why);
    }

    private static float[] random(long seed, int n) {
        Random rng = new Random(seed);
        float[] a = new float[n];
        for (int i = 0; i < n; i++) a[i] = (float) rng.nextGaussian();
        return a;
    }

    private static Trainer trainer(MambaModel m, int b, int t) {
        return Trainer.builder(m).batch(b).seqLen(t).gemmMode(GemmMode.DETERMINISTIC)
                .adamW(AdamW.ofLearningRate(1e-3).weightDecay(0.01)).clipGradNorm(0.5).build();
    }

    /** Replicas on cuda:0 … cuda:n−1 over NCCL vs one trainer on cuda:0 (shards from zero, rank-order sum), bitwise. */
    @Test
    void ncclOverEveryGpuIsBitIdenticalToOneGpu() {
        int max = Device.cudaCount();
        for (int n = 2; n <= max; n *= 2) checkBitIdentity(n);
        if (Integer.bitCount(max) != 1) checkBitIdentity(max);
    }

    private static void checkBitIdentity(int n) {
        Mamba1Config c = Mamba1Config.builder().dModel(256).layers(4).build();
        int b = 4, t = 64, in = 16;
        List<MambaModel> models = new ArrayList<>();
        List<Trainer> replicas = new ArrayList<>();
        List<Device> devices = new ArrayList<>();
        List<NcclCommunicator> comms = List.of();
        try (MambaModel refModel = MambaModel.builder(c).inputDim(in).seed(3).device(Device.cuda(0)).build();
             Trainer ref = trainer(refModel, b, t)) {
            for (int r = 0; r < n; r++) {
                devices.add(Device.cuda(r));
                models.add(MambaModel.builder(c).inputDim(in).seed(3).device(Device.cuda(r)).build());
                replicas.add(trainer(models.get(r), b, t));
            }
            comms = NcclCommunicator.group(devices, Duration.ofSeconds(120));
            try (DataParallelTrainer dp = DataParallelTrainer.of(replicas, comms, Reduction.RANK_ORDER)) {
                for (int k = 0; k < 3; k++) {
                    List<float[]> xs = new ArrayList<>(), ys = new ArrayList<>(), g = new ArrayList<>();
                    for (int r = 0; r < n; r++) {
                        xs.add(random(100L * k + r, b * t * in));
                        ys.add(random(50_000L + 100L * k + r, b * t * c.dModel()));
                        ref.zeroGrad();
                        ref.stepMse(xs.get(r), ys.get(r), BackwardOptions.accumulate().scale(1.0 / n));
                        g.add(ref.gradients());
                    }
                    ref.setGradients(DataParallelDeterminismTest.rankOrderSum(g));
                    StepResult want = ref.optimizerStep();
                    StepResult got = dp.stepMse(DataParallelDeterminismTest.concat(xs), DataParallelDeterminismTest.concat(ys));
                    assertEquals(want.gradNorm(), got.gradNorm(), 0.0, n + " GPUs, step " + k);
                    for (int r = 0; r < n; r++)
                        DataParallelDeterminismTest.assertSameWeights(ref, replicas.get(r), n + " GPUs, step " + k + ", cuda:" + r);
                }
            }
            System.out.println("data-parallel: " + n + " GPUs over NCCL bit-identical to one GPU (3 steps)");
        } finally {
            comms.forEach(NcclCommunicator::close);
            replicas.forEach(Trainer::close);
            models.forEach(MambaModel::close);
        }
    }

    /** The scaling table: ms per step at 1/2/4/8 GPUs with the same per-GPU batch; efficiency = t(1) / t(N). */
    @Test
    void scalingTable() {
        Assumptions.assumeTrue(Boolean.getBoolean("mamba4j.dp.scaling"), "set -Dmamba4j.dp.scaling=true for the scaling table");
        for (String shape : List.of("130m", "1.4b")) {
            Mamba1Config c = shape.equals("130m") ? Mamba1Config.builder().dModel(768).layers(24).build()
                    : Mamba1Config.builder().dModel(2048).layers(48).build();
            for (Reduction red : Reduction.values()) {
                double t1 = 0;
                for (int n = 1; n <= Device.cudaCount(); n *= 2) {
                    double ms = msPerStep(c, n, red);
                    if (n == 1) t1 = ms;
                    System.out.printf("data-parallel scaling: %s %-10s %d GPU(s)  %8.1f ms/step  efficiency %5.1f%%%n", shape, red, n,
                            ms, 100 * t1 / ms);
                }
            }
        }
    }

    private static double msPerStep(Mamba1Config c, int n, Reduction red) {
        int b = 8, t = 256, in = 64;
        List<MambaModel> models = new ArrayList<>();
        List<Trainer> replicas = new ArrayList<>();
        List<Device> devices = new ArrayList<>();
        List<NcclCommunicator> comms = List.of();
        try {
            for (int r = 0; r < n; r++) {
                devices.add(Device.cuda(r));
                models.add(MambaModel.builder(c).inputDim(in).seed(3).device(Device.cuda(r)).build());
                replicas.add(Trainer.builder(models.get(r)).batch(b).seqLen(t).gemmMode(GemmMode.DETERMINISTIC).build());
            }
            comms = NcclCommunicator.group(devices, Duration.ofSeconds(300));
            try (DataParallelTrainer dp = DataParallelTrainer.of(replicas, comms, red)) {
                float[] x = random(1, n * b * t * in), y = random(2, n * b * t * c.dModel());
                dp.stepMse(x, y);  // warm-up
                int steps = 3;
                long t0 = System.nanoTime();
                for (int k = 0; k < steps; k++) dp.stepMse(x, y);
                return (System.nanoTime() - t0) / 1e6 / steps;
            }
        } finally {
            comms.forEach(NcclCommunicator::close);
            replicas.forEach(Trainer::close);
            models.forEach(MambaModel::close);
        }
    }
}
