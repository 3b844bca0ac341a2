package org.mamba4j.parallel;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.mamba4j.AdamW;
import org.mamba4j.GemmMode;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.StepResult;
import org.mamba4j.Trainer;

/**
 * One rank of a multi-process data-parallel job, launched as torchrun would (RANK, WORLD_SIZE, MASTER_ADDR,
 * MASTER_PORT, MAMBA4J_DIST_TIMEOUT_SECONDS in the environment): trains {@code steps} steps over TCP, saving a
 * checkpoint after each, and prints one line per step. Usage: {@code DataParallelWorker <checkpoint dir> <steps>}.
 * Exits 0 when done, 3 with the exception's message on stderr when a collective failed.
 */
public final class DataParallelWorker {
    static final Mamba1Config CONFIG = Mamba1Config.builder().dModel(16).dState(4).layers(2).build();
    static final int B = 2, T = 10, IN = 3;

    private DataParallelWorker() {}

    /** Rank r's model: a different seed per rank (joining the group gives every rank rank 0's weights). */
    static MambaModel model(int rank) {
        return MambaModel.builder(CONFIG).inputDim(IN).seed(5 + rank).build();
    }

    static Trainer trainer(MambaModel m) {
        return Trainer.builder(m).batch(B).seqLen(T).gemmMode(GemmMode.DETERMINISTIC)
                .adamW(AdamW.ofLearningRate(4e-3)).clipGradNorm(0.1).build();
    }

    /** Rank r's shard of global step k: inputs and MSE targets. */
    static float[] inputs(int k, int r) {
        return random(new Random(31L * k + r), B * T * IN);
    }

    static float[] targets(int k, int r) {
        return random(new Random(50_000L + 31L * k + r), B * T * CONFIG.dModel());
    }

    private static float[] random(Random rng, int n) {
        float[] a = new float[n];
        for (int i = 0; i < n; i++) a[i] = (float) rng.nextGaussian();
        return a;
    }

    /** The whole job in one process, for comparison: world replicas in process, the same data and steps. */
    static List<float[]> inProcessWeights(int world, int steps) {
        List<MambaModel> models = new ArrayList<>();
        List<Trainer> trainers = new ArrayList<>();
        try {
            for (int r = 0; r < world; r++) {
                models.add(model(r));
                trainers.add(trainer(models.get(r)));
            }
            try (DataParallelTrainer dp = DataParallelTrainer.inProcess(trainers)) {
                for (int k = 0; k < steps; k++) {
                    List<float[]> xs = new ArrayList<>(), ys = new ArrayList<>();
                    for (int r = 0; r < world; r++) {
                        xs.add(inputs(k, r));
                        ys.add(targets(k, r));
                    }
                    dp.stepMse(DataParallelDeterminismTest.concat(xs), DataParallelDeterminismTest.concat(ys));
                }
                List<float[]> w = new ArrayList<>();
                for (String n : dp.model().parameterNames()) w.add(dp.model().getParameter(n));
                return w;
            }
        } finally {
            trainers.forEach(Trainer::close);
            models.forEach(MambaModel::close);
        }
    }

    public static void main(String[] args) {
        Path dir = Path.of(args[0]);
        int steps = Integer.parseInt(args[1]);
        LaunchConfig launch = LaunchConfig.fromEnvironment();
        try (MambaModel m = model(launch.rank()); Trainer t = trainer(m);
             TcpCommunicator comm = TcpCommunicator.connect(launch);
             DataParallelTrainer dp = DataParallelTrainer.of(t, comm)) {
            System.out.println("rank " + launch.rank() + " joined");
            for (int k = 0; k < steps; k++) {
                StepResult r = dp.stepMse(inputs(k, launch.rank()), targets(k, launch.rank()));
                dp.saveCheckpoint(dir);
                System.out.println("rank " + launch.rank() + " step " + r.step() + " saved |g| " + r.gradNorm());
                System.out.flush();
            }
        } catch (CommunicatorException e) {
            System.err.println("rank " + launch.rank() + " failed: " + e.getMessage());
            System.exit(3);
        }
        System.exit(0);
    }
}
