package org.mamba4j;

import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Sixteen threads at once, in a child JVM ({@link #main}) under a watchdog (as {@link ConcurrencyTest}: a deadlock
 * in native code would block even the JVM's exit, so the child is killed and the test fails):
 * <ul>
 *   <li>6 threads, each on its own model: prefill, step, forward, parameter reads and saves;
 *   <li>6 threads sharing one model, each with its own state: the same mix, saving the shared model;
 *   <li>3 threads sharing a second model with their own states, repeating their work until a 16th thread closes
 *       that model and some of their states at a random moment.
 * </ul>
 * Every result must equal, bit for bit, the same thread's work run alone on fresh objects (the thread's own
 * sequential run); every saved file must load back to exactly the saved weights; after the close, calls must
 * throw {@link IllegalStateException} saying what is closed — never another exception, a crash or a hang.
 */
@Tag("concurrency")
class StressTest {
    private static final Duration TIMEOUT = Duration.ofSeconds(90);
    private static final int OWN = 6, SHARED = 6, VICTIMS = 3, ROUNDS = 10;
    private static final Mamba1Config CONFIG = Mamba1Config.builder().dModel(32).dState(8).layers(2).build();
    private static final int IN = 4, B = 2, T = 12;
    private static final String PARAM = "backbone.layers.1.mixer.out_proj.weight";

    @Test
    void sixteenThreadsGiveSequentialResultsOrIllegalState(@TempDir Path dir) throws Exception {
        Path log = dir.resolve("child.log");
        List<String> command = new ArrayList<>();
        command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        command.add("--enable-native-access=ALL-UNNAMED");
        for (String key : System.getProperties().stringPropertyNames())
            if (key.startsWith("org.bytedeco.")) command.add("-D" + key + "=" + System.getProperty(key));
        command.addAll(List.of("-cp", System.getProperty("java.class.path"), StressTest.class.getName(), dir.toString()));
        Process child = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        if (!child.waitFor(TIMEOUT.toSeconds(), TimeUnit.SECONDS)) {
            child.destroyForcibly().waitFor();
            fail("the stress run did not finish in " + TIMEOUT.toSeconds() + " s (deadlock?); child killed:\n" + Files.readString(log));
        }
        String out = Files.readString(log);
        if (child.exitValue() != 0) fail("the stress run failed (exit " + child.exitValue() + "):\n" + out);
        out.lines().filter(l -> l.startsWith("stress:")).forEach(System.out::println);
    }

    private static MambaModel model(long seed) {
        return MambaModel.builder(CONFIG).inputDim(IN).seed(seed).build();
    }

    /**
     * One thread's work: per round a prefill, a step, a stateless forward, a parameter read, and (every third
     * round) a save whose file must read back as the weights. Returns every output in order; stops at the first
     * exception, which the caller judges.
     */
    private static List<float[]> work(MambaModel m, MambaState s, long seed, Path saveTo, List<float[]> out) {
        Random r = new Random(seed);
        for (int round = 0; round < ROUNDS; round++) {
            float[] prompt = TestUtil.random(r, B * T * IN, 1), x = TestUtil.random(r, B * IN, 1);
            s.reset();
            out.add(m.prefill(s, prompt, T));
            out.add(m.step(s, x));
            out.add(m.forward(prompt, B, T));
            out.add(m.getParameter(PARAM));
            if (round % 3 == 0 && saveTo != null) {
                m.save(saveTo);
                try (MambaModel back = MambaModel.load(saveTo)) {
                    out.add(back.getParameter(PARAM));
                }
            }
        }
        return out;
    }

    private static void assertSame(String who, List<float[]> expected, List<float[]> actual, boolean prefixOnly) {
        if (prefixOnly ? actual.size() > expected.size() : actual.size() != expected.size())
            throw new AssertionError(who + ": " + actual.size() + " outputs, expected " + expected.size());
        for (int i = 0; i < actual.size(); i++)
            if (!Arrays.equals(expected.get(i), actual.get(i)))  // Arrays.equals on floats compares bits
                throw new AssertionError(who + ": output " + i + " differs from the sequential run");
    }

    /** The child: sequential reference runs, then all sixteen threads at once. Exit code 0 = every check passed. */
    public static void main(String[] args) throws Exception {
        Path dir = Path.of(args[0]);
        // the sequential references: each thread's work alone, on fresh objects
        List<List<float[]>> own = new ArrayList<>(), shared = new ArrayList<>(), victims = new ArrayList<>();
        for (int i = 0; i < OWN; i++)
            try (MambaModel m = model(100 + i); MambaState s = m.newState(B)) {
                own.add(work(m, s, i, dir.resolve("ref-own-" + i), new ArrayList<>()));
            }
        try (MambaModel m = model(200)) {
            for (int i = 0; i < SHARED; i++)
                try (MambaState s = m.newState(B)) {
                    shared.add(work(m, s, 10 + i, dir.resolve("ref-shared-" + i), new ArrayList<>()));
                }
        }
        try (MambaModel m = model(300)) {
            for (int i = 0; i < VICTIMS; i++)
                try (MambaState s = m.newState(B)) {
                    victims.add(work(m, s, 20 + i, null, new ArrayList<>()));
                }
        }

        MambaModel sharedModel = model(200), victimModel = model(300);
        List<MambaState> victimStates = new ArrayList<>();
        for (int i = 0; i < VICTIMS; i++) victimStates.add(victimModel.newState(B));
        CyclicBarrier start = new CyclicBarrier(OWN + SHARED + VICTIMS + 1);
        AtomicLong closedCalls = new AtomicLong();
        ExecutorService pool = Executors.newFixedThreadPool(OWN + SHARED + VICTIMS + 1);
        List<Future<?>> jobs = new ArrayList<>();
        for (int i = 0; i < OWN; i++) {
            int k = i;
            jobs.add(pool.submit(() -> {
                try (MambaModel m = model(100 + k); MambaState s = m.newState(B)) {
                    start.await();
                    assertSame("own-" + k, own.get(k), work(m, s, k, dir.resolve("own-" + k), new ArrayList<>()), false);
                }
                return null;
            }));
        }
        for (int i = 0; i < SHARED; i++) {
            int k = i;
            jobs.add(pool.submit(() -> {
                try (MambaState s = sharedModel.newState(B)) {
                    start.await();
                    assertSame("shared-" + k, shared.get(k), work(sharedModel, s, 10 + k, dir.resolve("shared-" + k), new ArrayList<>()), false);
                }
                return null;
            }));
        }
        for (int i = 0; i < VICTIMS; i++) {
            int k = i;
            jobs.add(pool.submit(() -> {
                start.await();
                for (int repeat = 0; ; repeat++) {  // the same work over and over, until the close stops it
                    List<float[]> out = new ArrayList<>();
                    try {
                        work(victimModel, victimStates.get(k), 20 + k, null, out);
                    } catch (IllegalStateException e) {
                        if (!e.getMessage().matches("this (MambaModel|MambaState) is closed"))
                            throw new AssertionError("victim-" + k + ": unexpected message " + e.getMessage(), e);
                        closedCalls.incrementAndGet();
                        assertSame("victim-" + k, victims.get(k), out, true);  // what ran before the close is right
                        return null;
                    }
                    assertSame("victim-" + k + " repeat " + repeat, victims.get(k), out, false);
                }
            }));
        }
        jobs.add(pool.submit(() -> {
            start.await();
            Thread.sleep(50 + new Random().nextInt(250));
            for (int k = 0; k < VICTIMS; k += 2) victimStates.get(k).close();  // some states first, then the model
            victimModel.close();
            return null;
        }));
        try {
            for (Future<?> f : jobs) f.get();
        } finally {
            pool.shutdown();
        }
        for (MambaState s : victimStates) s.close();
        sharedModel.close();
        System.out.printf("stress: %d threads, %d rounds each, %d victim threads stopped by the close%n",
                OWN + SHARED + VICTIMS + 1, ROUNDS, closedCalls.get());
        System.exit(0);
    }
}
