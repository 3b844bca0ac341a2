package org.mamba4j.samples;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.mamba4j.AdamW;
import org.mamba4j.Device;
import org.mamba4j.GemmMode;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.StepResult;
import org.mamba4j.Trainer;
import org.mamba4j.parallel.Communicator;
import org.mamba4j.parallel.DataParallelTrainer;
import org.mamba4j.parallel.LaunchConfig;
import org.mamba4j.parallel.NcclCommunicator;
import org.mamba4j.parallel.TcpCommunicator;

/**
 * Data-parallel training in both launch forms (docs/data-parallel.md), on a toy regression task.
 *
 * <pre>
 * # one process, N replicas on N threads (CPU, or one GPU each with --cuda)
 * java -cp samples.jar org.mamba4j.samples.DataParallelTraining --replicas 4 [--cuda] [--steps 50] [--checkpoints DIR]
 * # one process per GPU, launched by torchrun (or anything that sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT)
 * torchrun --nproc_per_node 8 --no-python java -cp samples.jar org.mamba4j.samples.DataParallelTraining --cuda
 * </pre>
 *
 * With RANK in the environment it is one rank of a multi-process job: NCCL between GPUs with --cuda, TCP between
 * CPU processes without. Every replica trains batch 8 of the global batch (replicas × 8); checkpoints are written by
 * rank 0 into the folder (LATEST names the last complete one).
 */
public final class DataParallelTraining {
    private static final int B = 8, T = 64, IN = 16;

    private DataParallelTraining() {}

    public static void main(String[] args) {
        int replicas = 2, steps = 20;
        boolean cuda = false;
        Path checkpoints = Path.of("dp-checkpoints");
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--replicas" -> replicas = Integer.parseInt(args[++i]);
                case "--steps" -> steps = Integer.parseInt(args[++i]);
                case "--cuda" -> cuda = true;
                case "--checkpoints" -> checkpoints = Path.of(args[++i]);
                default -> throw new IllegalArgumentException("unknown argument " + args[i]
                        + " (--replicas N, --steps N, --cuda, --checkpoints DIR)");
            }
        }
        if (System.getenv("RANK") != null) multiProcess(cuda, steps, checkpoints);
        else inProcess(replicas, cuda, steps, checkpoints);
    }

    static void inProcess(int n, boolean cuda, int steps, Path checkpoints) {
        Mamba1Config config = Mamba1Config.builder().dModel(64).layers(2).build();
        List<MambaModel> models = new ArrayList<>();
        List<Trainer> trainers = new ArrayList<>();
        try {
            for (int r = 0; r < n; r++) {
                Device device = cuda ? Device.cuda(r) : Device.cpu();
                models.add(MambaModel.builder(config).inputDim(IN).device(device).seed(1).build());
                trainers.add(trainer(models.get(r)));
            }
            // DATA-PARALLEL-IN-PROCESS-BEGIN
            try (DataParallelTrainer dp = DataParallelTrainer.inProcess(trainers)) {   // one thread per replica
                for (int k = 0; k < steps; k++) {
                    float[][] batch = batch(k, dp.globalBatch());                          // the whole global batch
                    StepResult r = dp.stepMse(batch[0], batch[1]);                         // replica i: rows [8i, 8i+8)
                    if (k % 5 == 4) System.out.println(r);
                }
                System.out.println("checkpoint: " + dp.saveCheckpoint(checkpoints));
            }
            // DATA-PARALLEL-IN-PROCESS-END
        } finally {
            trainers.forEach(Trainer::close);
            models.forEach(MambaModel::close);
        }
    }

    static void multiProcess(boolean cuda, int steps, Path checkpoints) {
        Mamba1Config config = Mamba1Config.builder().dModel(64).layers(2).build();
        // DATA-PARALLEL-MULTI-PROCESS-BEGIN
        LaunchConfig launch = LaunchConfig.fromEnvironment();                    // RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*
        Device device = cuda ? launch.localDevice() : Device.cpu();
        try (MambaModel model = MambaModel.builder(config).inputDim(IN).device(device).seed(1).build();
             Trainer trainer = trainer(model);
             Communicator comm = cuda ? NcclCommunicator.connect(launch, device) : TcpCommunicator.connect(launch);
             DataParallelTrainer dp = DataParallelTrainer.of(trainer, comm)) {
            for (int k = 0; k < steps; k++) {
                float[][] global = batch(k, dp.globalBatch());
                float[][] mine = shard(global, launch.rank());                       // this rank's 8 sequences
                StepResult r = dp.stepMse(mine[0], mine[1]);
                if (launch.rank() == 0 && k % 5 == 4) System.out.println(r);
            }
            dp.saveCheckpoint(checkpoints);                                         // rank 0 writes, all wait
        }
        // DATA-PARALLEL-MULTI-PROCESS-END
    }

    private static Trainer trainer(MambaModel m) {
        return Trainer.builder(m).batch(B).seqLen(T).gemmMode(GemmMode.DETERMINISTIC)
                .adamW(AdamW.ofLearningRate(2e-3)).clipGradNorm(1.0).build();
    }

    /** Global step k: inputs [rows, T, IN] and targets [rows, T, 64] = a fixed random linear map of the inputs. */
    static float[][] batch(int k, int rows) {
        Random rng = new Random(1000 + k), map = new Random(7);
        float[][] w = new float[64][IN];
        for (float[] row : w) for (int i = 0; i < IN; i++) row[i] = (float) (map.nextGaussian() / Math.sqrt(IN));
        float[] x = new float[rows * T * IN], y = new float[rows * T * 64];
        for (int i = 0; i < x.length; i++) x[i] = (float) rng.nextGaussian();
        for (int p = 0; p < rows * T; p++)
            for (int o = 0; o < 64; o++) {
                float s = 0;
                for (int i = 0; i < IN; i++) s += w[o][i] * x[p * IN + i];
                y[p * 64 + o] = s;
            }
        return new float[][] {x, y};
    }

    /** Rank r's rows of a global batch. */
    static float[][] shard(float[][] global, int rank) {
        int xs = B * T * IN, ys = B * T * 64;
        float[] x = new float[xs], y = new float[ys];
        System.arraycopy(global[0], rank * xs, x, 0, xs);
        System.arraycopy(global[1], rank * ys, y, 0, ys);
        return new float[][] {x, y};
    }
}
