package org.mamba4j.parallel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;

import com.code_intelligence.jazzer.junit.DictionaryEntries;
import com.code_intelligence.jazzer.junit.FuzzTest;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.AfterAll;
import org.mamba4j.AdamW;
import org.mamba4j.CheckpointException;
import org.mamba4j.GemmMode;
import org.mamba4j.LinearHead;
import org.mamba4j.LossScaler;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.OptimizerState;
import org.mamba4j.Trainer;
import org.mamba4j.fuzz.FuzzChecks;

/**
 * Coverage-guided fuzzing of {@link DataParallelTrainer#loadCheckpoint}'s own files: an input is {@code dir/LATEST}
 * and {@code step-1/loss-scaler.txt} (split at a line {@code =====}) next to a real checkpoint's model, optimizer state
 * and output head (those readers have fuzz targets of their own). Besides {@link FuzzChecks}' rules, a rejected input
 * must leave the replica exactly as it was — weights, head, moments, step count, loss scale — and the replica's state
 * differs from the checkpoint's, so a half-applied load would show. Seeds: {@code DataParallelCheckpointFuzzTestInputs}.
 */
class DataParallelCheckpointFuzzTest {
    private static final Mamba1Config CONFIG = Mamba1Config.builder().dModel(8).dState(4).layers(1).build();
    private static final int B = 1, T = 4, IN = 2, HEAD = 2;
    private static MambaModel model;
    private static Trainer trainer;
    private static DataParallelTrainer dp;
    private static Path dir, stepFolder;
    /** The replica's state before each input (not the checkpoint's), and what puts it back after a load. */
    private static float[] before;
    private static Runnable restore;

    private static synchronized void setUp() {
        if (dp != null) return;
        model = MambaModel.builder(CONFIG).inputDim(IN).seed(5).build();
        trainer = Trainer.builder(model).batch(B).seqLen(T).gemmMode(GemmMode.DETERMINISTIC).adamW(AdamW.ofLearningRate(1e-2))
                .outputHead(HEAD).headSeed(6).lossScaler(LossScaler.dynamic().withInitScale(64).withGrowth(2, 1)).build();
        dp = DataParallelTrainer.inProcess(List.of(trainer));
        dp.stepMse(random(1, B * T * IN), random(2, B * T * HEAD));
        dir = FuzzChecks.scratch("data-parallel-checkpoint");
        stepFolder = dp.saveCheckpoint(dir);
        dp.stepMse(random(3, B * T * IN), random(4, B * T * HEAD));  // the replica moves past the checkpoint
        OptimizerState moments = trainer.exportOptimizerState();
        LinearHead head = trainer.head();
        double scale = trainer.lossScale();
        long clean = trainer.lossScalerCleanSteps();
        Map<String, float[]> weights = new java.util.LinkedHashMap<>();
        for (String n : model.parameterNames()) weights.put(n, model.getParameter(n));
        restore = () -> {
            weights.forEach(model::setParameter);
            trainer.importOptimizerState(moments);
            trainer.loadHead(head);
            trainer.restoreLossScaler(scale, clean);
        };
        before = fingerprint();
    }

    @FuzzTest(maxDuration = "5s")  // the build's bounded run; scripts/fuzz.sh runs longer
    @DictionaryEntries({"\"step-\"", "\"step-1\"", "\"../\"", "\"64.0 0\"", "\"E38\"", "\"\\n=====\\n\""})
    void load(byte[] data) {
        setUp();
        Map<String, byte[]> files = FuzzChecks.split(data, "LATEST", "loss-scaler.txt");
        write(dir.resolve("LATEST"), files.get("LATEST"));
        write(stepFolder.resolve("loss-scaler.txt"), files.get("loss-scaler.txt"));
        boolean[] loaded = {false};
        FuzzChecks.bytes(data, () -> {
            try {
                dp.loadCheckpoint(dir);
                loaded[0] = true;
                return true;
            } catch (CheckpointException rejected) {
                return false;
            }
        });
        if (loaded[0]) {
            restore.run();
        } else {
            assertArrayEquals(before, fingerprint(), "a rejected checkpoint changed the replica");
        }
    }

    /** Everything a load would change, as one array. */
    private static float[] fingerprint() {
        return DataParallelCheckpointTest.fingerprint(trainer);
    }

    private static void write(Path file, byte[] content) {
        try {
            if (content == null) Files.deleteIfExists(file);
            else Files.write(file, content);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static float[] random(long seed, int n) {
        Random rng = new Random(seed);
        float[] a = new float[n];
        for (int i = 0; i < n; i++) a[i] = (float) rng.nextGaussian();
        return a;
    }

    @AfterAll
    static void report() {
        FuzzChecks.report("data-parallel-checkpoint");
        if (dp != null) dp.close();
        if (trainer != null) trainer.close();
        if (model != null) model.close();
        dp = null;
    }
}
