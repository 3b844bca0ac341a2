package org.mamba4j.parallel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.mamba4j.MambaModel;
import org.mamba4j.OptimizerState;

/**
 * The multi-process launch form on the CPU: several JVMs started with torchrun's environment variables train over
 * TCP on loopback. Two processes give weights bit-identical to the same job in one process; a killed rank and a
 * stopped (hung) rank make rank 0 exit with a clear error within its timeout, and the last checkpoint stays complete
 * and loadable.
 */
class DataParallelMultiProcessTest {
    private static final int TIMEOUT_SECONDS = 4;

    private static Process start(int rank, int world, int port, Path dir, int steps, Path log) throws IOException {
        List<String> command = new ArrayList<>();
        command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        for (String key : System.getProperties().stringPropertyNames())
            if (key.startsWith("org.bytedeco.")) command.add("-D" + key + "=" + System.getProperty(key));
        command.addAll(List.of("-cp", System.getProperty("java.class.path"), DataParallelWorker.class.getName(),
                dir.toString(), Integer.toString(steps)));
        ProcessBuilder pb = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile());
        pb.environment().put("RANK", Integer.toString(rank));
        pb.environment().put("WORLD_SIZE", Integer.toString(world));
        pb.environment().put("LOCAL_RANK", Integer.toString(rank));
        pb.environment().put("MASTER_ADDR", "127.0.0.1");
        pb.environment().put("MASTER_PORT", Integer.toString(port));
        pb.environment().put("MAMBA4J_DIST_TIMEOUT_SECONDS", Integer.toString(TIMEOUT_SECONDS));
        return pb.start();
    }

    private static int await(Process p, Path log, int seconds) throws Exception {
        if (!p.waitFor(seconds, TimeUnit.SECONDS)) {
            p.destroyForcibly().waitFor();
            fail("a worker did not finish in " + seconds + " s (a hang):\n" + Files.readString(log));
        }
        return p.exitValue();
    }

    /** Waits until the log shows {@code line} (or the process ends). */
    private static void awaitLine(Process p, Path log, String line, int seconds) throws Exception {
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        while (System.nanoTime() < end) {
            if (Files.exists(log) && Files.readString(log).contains(line)) return;
            if (!p.isAlive()) fail("the worker ended before '" + line + "':\n" + Files.readString(log));
            Thread.sleep(50);
        }
        fail("no '" + line + "' within " + seconds + " s:\n" + Files.readString(log));
    }

    private static List<float[]> weights(Path modelFile) {
        try (MambaModel m = MambaModel.load(modelFile)) {
            List<float[]> w = new ArrayList<>();
            for (String n : m.parameterNames()) w.add(m.getParameter(n));
            return w;
        }
    }

    @Test
    void twoProcessesEqualOneProcessBitForBit(@TempDir Path dir) throws Exception {
        int steps = 3, port = CommunicatorTest.freePort();
        Path ckpt = dir.resolve("ckpt"), log0 = dir.resolve("rank0.log"), log1 = dir.resolve("rank1.log");
        Process p0 = start(0, 2, port, ckpt, steps, log0), p1 = start(1, 2, port, ckpt, steps, log1);
        assertEquals(0, await(p0, log0, 120), () -> read(log0));
        assertEquals(0, await(p1, log1, 120), () -> read(log1));
        Path latest = DataParallelTrainer.latestCheckpoint(ckpt);
        assertEquals("step-" + steps, latest.getFileName().toString());
        List<float[]> multi = weights(latest.resolve("model.safetensors")), single = DataParallelWorker.inProcessWeights(2, steps);
        assertEquals(single.size(), multi.size());
        for (int i = 0; i < single.size(); i++) assertArrayEquals(single.get(i), multi.get(i), "tensor " + i);
        assertEquals(steps, OptimizerState.load(latest.resolve("optimizer.safetensors")).step());
    }

    @Test
    void aKilledRankFailsRankZeroAndTheLastCheckpointStaysIntact(@TempDir Path dir) throws Exception {
        checkFault(dir, p -> p.destroyForcibly(), "rank 1 closed its connection");
    }

    @Test
    void aHungRankTimesOutRankZero(@TempDir Path dir) throws Exception {
        checkFault(dir, p -> {
            try {
                new ProcessBuilder("kill", "-STOP", Long.toString(p.pid())).start().waitFor();  // alive, silent
            } catch (IOException | InterruptedException e) {
                throw new AssertionError(e);
            }
        }, "rank 1 did not reach");
    }

    private void checkFault(Path dir, java.util.function.Consumer<Process> fault, String expected) throws Exception {
        int port = CommunicatorTest.freePort();
        Path ckpt = dir.resolve("ckpt"), log0 = dir.resolve("rank0.log"), log1 = dir.resolve("rank1.log");
        Process p0 = start(0, 2, port, ckpt, 100_000, log0), p1 = start(1, 2, port, ckpt, 100_000, log1);
        try {
            awaitLine(p0, log0, "rank 0 step 3 saved", 120);
            fault.accept(p1);
            long t0 = System.nanoTime();
            int exit = await(p0, log0, 60);
            long ms = (System.nanoTime() - t0) / 1_000_000;
            String out = read(log0);
            assertEquals(3, exit, out);
            assertTrue(out.contains(expected), out);
            assertTrue(ms < 3 * TIMEOUT_SECONDS * 1000L, "rank 0 failed after " + ms + " ms");
        } finally {
            p1.destroyForcibly().waitFor();
            p0.destroyForcibly().waitFor();
        }
        // the last checkpoint is complete: every file loads and checks out, and they agree on the step
        Path latest = DataParallelTrainer.latestCheckpoint(ckpt);
        long step = Long.parseLong(latest.getFileName().toString().substring("step-".length()));
        assertTrue(step >= 3, latest.toString());
        assertEquals(step, OptimizerState.load(latest.resolve("optimizer.safetensors")).step());
        assertTrue(weights(latest.resolve("model.safetensors")).size() > 0);
    }

    private static String read(Path log) {
        try {
            return Files.readString(log);
        } catch (IOException e) {
            return e.toString();
        }
    }
}
