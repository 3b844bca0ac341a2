package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Independent models used from several threads at once must give exactly what the same work gives run
 * one thread after the other: the Java API serialises calls per model, and libmamba must keep models (and
 * its process-wide CPU thread pool) independent. Four models of different shapes: three with one thread
 * each that infers and trains, one shared by two threads that infer on their own states and run training
 * steps with learning rate 0 (their results must not depend on the interleaving, so the shared weights must
 * not move). Every output is compared bit for bit with a sequential run on fresh models.
 *
 * <p>The concurrent run happens in a child JVM (this class's {@link #main}) under a watchdog: threads
 * deadlocked inside native code cannot be interrupted, and they would even block the exit of the JVM that
 * holds them (libmamba's static thread pool waits for them in its destructor), so on timeout the child is
 * killed and the test fails — a deadlock or a native crash fails the build instead of hanging it.
 *
 * <p>Tagged {@code concurrency} (select or exclude it with surefire's {@code groups}). It fails with a CPU
 * backend of libmamba that shares one unsynchronised thread pool between concurrent callers.
 */
@Tag("concurrency")
class ConcurrencyTest {
    private static final int ROUNDS = 12;
    private static final Duration TIMEOUT = Duration.ofSeconds(20);

    /** One thread's model and work: shapes chosen so that the stages use the CPU thread pool (≥ 16K updates). */
    private record Job(String name, int model, boolean trainsWeights, int batch, int steps, long seed) {}

    private record Spec(ModelConfig config, int inputDim, long seed) {}

    private static final Spec[] MODELS = {
        new Spec(Mamba1Config.builder().dModel(32).dState(8).layers(2).build(), 5, 11),
        new Spec(Mamba1Config.builder().dModel(64).dState(16).layers(2).build(), 8, 12),
        new Spec(Mamba1Config.builder().dModel(96).dState(16).dConv(3).layers(1).build(), 0, 13),
        new Spec(Mamba1Config.builder().dModel(64).dState(16).layers(3).build(), 6, 14),  // shared
        // Mamba-3 SISO: its scan and scan backward use the pool and per-thread scratch too
        new Spec(Mamba3Config.builder().dModel(64).dState(16).headdim(16).layers(2).chunkSize(16).build(), 7, 15),
        new Spec(Mamba3Config.builder().dModel(32).dState(32).headdim(8).ngroups(2).layers(1).build(), 4, 16),
    };

    private static final Job[] JOBS = {
        new Job("small", 0, true, 3, 24, 101),
        new Job("medium", 1, true, 4, 32, 102),
        new Job("wide", 2, true, 2, 48, 103),
        new Job("shared-a", 3, false, 4, 40, 104),
        new Job("shared-b", 3, false, 3, 36, 105),
        new Job("mamba3-train", 4, true, 3, 40, 106),
        new Job("mamba3-infer", 5, false, 4, 33, 107),
    };

    @Test
    void concurrentWorkIsBitwiseEqualToSequentialWork(@TempDir Path dir) throws Exception {
        List<List<float[]>> expected = new ArrayList<>();
        List<MambaModel> models = build();
        try {
            for (Job job : JOBS) {
                try (Worker w = new Worker(job, models.get(job.model))) {
                    List<float[]> out = new ArrayList<>();
                    for (int round = 0; round < ROUNDS; round++) out.addAll(w.round(round));
                    expected.add(out);
                }
            }
        } finally {
            models.forEach(MambaModel::close);
        }

        List<List<float[]>> actual = runInChildJvm(dir);

        for (int j = 0; j < JOBS.length; j++) {
            assertEquals(expected.get(j).size(), actual.get(j).size());
            for (int i = 0; i < expected.get(j).size(); i++) {
                float[] e = expected.get(j).get(i), a = actual.get(j).get(i);
                assertEquals(e.length, a.length);
                for (int k = 0; k < e.length; k++)
                    if (Float.floatToRawIntBits(e[k]) != Float.floatToRawIntBits(a[k]))
                        fail(JOBS[j].name + ": output " + i + " (round " + i / Worker.OUTPUTS + ") differs at " + k + ": "
                                + a[k] + " concurrently, " + e[k] + " sequentially");
            }
        }
    }

    /** Runs {@link #main} in a child JVM with this JVM's class path and native settings; kills it on timeout. */
    private static List<List<float[]>> runInChildJvm(Path dir) throws IOException, InterruptedException {
        Path results = dir.resolve("results.bin"), log = dir.resolve("child.log");
        List<String> command = new ArrayList<>();
        command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        command.add("--enable-native-access=ALL-UNNAMED");
        for (String key : System.getProperties().stringPropertyNames())
            if (key.startsWith("org.bytedeco.")) command.add("-D" + key + "=" + System.getProperty(key));  // the natives' cache
        command.addAll(List.of("-cp", System.getProperty("java.class.path"), ConcurrencyTest.class.getName(), results.toString()));
        Process child = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        if (!child.waitFor(TIMEOUT.toSeconds(), TimeUnit.SECONDS)) {
            child.destroyForcibly().waitFor();
            fail("the concurrent run did not finish in " + TIMEOUT.toSeconds() + " s (deadlock?); child killed. Its output:\n"
                    + tail(log));
        }
        if (child.exitValue() != 0)
            fail("the concurrent run failed with exit code " + child.exitValue() + ". Its output:\n" + tail(log));
        return read(results);
    }

    private static String tail(Path log) throws IOException {
        String text = Files.readString(log);
        return text.length() <= 4000 ? text : "..." + text.substring(text.length() - 4000);
    }

    /** The child: the same jobs on fresh models, all threads at once; writes every output to {@code args[0]}. */
    public static void main(String[] args) throws Exception {
        List<List<float[]>> results = runConcurrently();
        try (DataOutputStream out = new DataOutputStream(new BufferedOutputStream(Files.newOutputStream(Path.of(args[0]))))) {
            for (List<float[]> job : results) {
                out.writeInt(job.size());
                for (float[] v : job) {
                    out.writeInt(v.length);
                    for (float f : v) out.writeInt(Float.floatToRawIntBits(f));
                }
            }
        }
        System.exit(0);
    }

    private static List<List<float[]>> read(Path file) throws IOException {
        List<List<float[]>> results = new ArrayList<>();
        try (DataInputStream in = new DataInputStream(new BufferedInputStream(Files.newInputStream(file)))) {
            for (int j = 0; j < JOBS.length; j++) {
                List<float[]> job = new ArrayList<>();
                for (int i = in.readInt(); i > 0; i--) {
                    float[] v = new float[in.readInt()];
                    for (int k = 0; k < v.length; k++) v[k] = Float.intBitsToFloat(in.readInt());
                    job.add(v);
                }
                results.add(job);
            }
        }
        return results;
    }

    private static List<List<float[]>> runConcurrently() throws Exception {
        List<MambaModel> models = build();
        ExecutorService pool = Executors.newFixedThreadPool(JOBS.length);
        CyclicBarrier barrier = new CyclicBarrier(JOBS.length);  // each round starts together: maximal overlap
        try {
            List<Future<List<float[]>>> futures = new ArrayList<>();
            for (Job job : JOBS) {
                futures.add(pool.submit(() -> {
                    try (Worker w = new Worker(job, models.get(job.model))) {
                        List<float[]> out = new ArrayList<>();
                        for (int round = 0; round < ROUNDS; round++) {
                            barrier.await();
                            out.addAll(w.round(round));
                        }
                        return out;
                    }
                }));
            }
            List<List<float[]>> results = new ArrayList<>();
            for (Future<List<float[]>> f : futures) {
                try {
                    results.add(f.get());
                } catch (ExecutionException e) {
                    throw new AssertionError(e.getCause());
                }
            }
            return results;
        } finally {
            pool.shutdown();
            models.forEach(MambaModel::close);
        }
    }

    private static List<MambaModel> build() {
        List<MambaModel> models = new ArrayList<>();
        for (Spec s : MODELS)
            models.add(MambaModel.builder(s.config).inputDim(s.inputDim).seed(s.seed).build());
        return models;
    }

    /** One thread's state, trainer and deterministic inputs; each round mixes inference and training. */
    private static final class Worker implements AutoCloseable {
        static final int OUTPUTS = 5;
        private final Job job;
        private final MambaModel model;
        private final MambaState state;
        private final Trainer trainer;
        private final int in, out;

        Worker(Job job, MambaModel model) {
            this.job = job;
            this.model = model;
            this.in = model.inputWidth();
            this.out = model.outputWidth();
            this.state = model.newState(job.batch);
            // threads sharing a model train with learning rate 0: the gradients are real work, the weights stay put
            AdamW adamW = job.trainsWeights ? AdamW.ofLearningRate(1e-3).weightDecay(0.01) : AdamW.ofLearningRate(0).weightDecay(0);
            this.trainer = Trainer.builder(model).batch(job.batch).seqLen(job.steps).adamW(adamW).clipGradNorm(1.0).build();
        }

        List<float[]> round(int round) {
            Random r = new Random(job.seed * 1000 + round);
            int B = job.batch, T = job.steps;
            float[] prompt = TestUtil.random(r, B * T * in, 1), x = TestUtil.random(r, B * in, 1);
            float[] target = TestUtil.random(r, B * T * out, 1);
            state.reset();
            float[] last = model.prefill(state, prompt, T);
            float[] step = model.step(state, x);
            float[] all = model.forward(prompt, B, T);
            StepResult s = trainer.stepMse(prompt, target);
            float[] trained = trainer.forward(prompt);
            return List.of(last, step, all, new float[] {(float) s.loss(), (float) s.gradNorm()}, trained);
        }

        @Override
        public void close() {
            trainer.close();
            state.close();
        }
    }
}
