package org.mamba4j.samples;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.mamba4j.parallel.DataParallelTrainer;

/** The sample's in-process form on the CPU: it trains and leaves a complete checkpoint (LATEST, model, optimizer). */
class DataParallelTrainingTest {
    @Test
    void inProcessFormTrainsAndCheckpoints(@TempDir Path dir) {
        DataParallelTraining.main(new String[] {"--replicas", "2", "--steps", "5", "--checkpoints", dir.toString()});
        Path latest = DataParallelTrainer.latestCheckpoint(dir);
        assertTrue(Files.isRegularFile(latest.resolve("model.safetensors")));
        assertTrue(Files.isRegularFile(latest.resolve("optimizer.safetensors")));
    }
}
