package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * No native memory is lost per object: a child JVM ({@link #main}) runs create / use / close cycles of a model, a
 * state, two tensors and a trainer (a decode step from tensors, a prefill, a training step, an optimiser-state
 * export) and reports its resident set (VmRSS) after a warm-up and at the end; the growth must stay under
 * {@value #MAX_GROWTH_MIB} MiB. The child's heap is fixed and pre-touched, so the resident set moves only with
 * native memory. Up to {@value #CYCLES} cycles within {@value #SECONDS} s, at least {@value #MIN_CYCLES}; the count
 * reached is printed (docs/reliability.md has the figures of a full run). A leak of 200 bytes per cycle, a single
 * float array of a tiny model, would show as 19 MiB over 100,000 cycles.
 */
@Tag("leak")
class LeakTest {
    private static final int CYCLES = 100_000, MIN_CYCLES = 20_000, SECONDS = 60, WARM_UP = 2_000;
    private static final long MAX_GROWTH_MIB = 16;

    @Test
    void createUseCloseCyclesKeepTheResidentSetFlat(@TempDir Path dir) throws Exception {
        Path log = dir.resolve("child.log");
        List<String> command = new ArrayList<>();
        command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        command.addAll(List.of("--enable-native-access=ALL-UNNAMED", "-Xms96m", "-Xmx96m", "-XX:+AlwaysPreTouch", "-XX:+UseSerialGC"));
        for (String key : System.getProperties().stringPropertyNames())
            if (key.startsWith("org.bytedeco.")) command.add("-D" + key + "=" + System.getProperty(key));
        command.addAll(List.of("-cp", System.getProperty("java.class.path"), LeakTest.class.getName(),
                Integer.toString(Integer.getInteger("mamba4j.leakCycles", CYCLES)), Integer.toString(SECONDS)));
        Process child = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        if (!child.waitFor(SECONDS + 60, TimeUnit.SECONDS)) {
            child.destroyForcibly().waitFor();
            fail("the leak run did not finish (deadlock?):\n" + Files.readString(log));
        }
        String out = Files.readString(log);
        if (child.exitValue() != 0) fail("the leak run failed:\n" + out);
        String result = out.lines().filter(l -> l.startsWith("cycles ")).findFirst().orElseThrow(() -> new AssertionError(out));
        String[] f = result.split(" ");  // cycles N rssAfterWarmUpKiB rssEndKiB seconds
        long cycles = Long.parseLong(f[1]), start = Long.parseLong(f[2]), end = Long.parseLong(f[3]);
        System.out.printf("leak: %d cycles in %s s, VmRSS %d KiB after %d warm-up cycles, %d KiB at the end (%+d KiB)%n",
                cycles, f[4], start, WARM_UP, end, end - start);
        assertTrue(cycles >= MIN_CYCLES, "only " + cycles + " cycles fit in " + SECONDS + " s");
        assertTrue(end - start < MAX_GROWTH_MIB * 1024, "VmRSS grew by " + (end - start) + " KiB over " + cycles + " cycles");
    }

    /** The child: {@code <cycles> <seconds>}; prints {@code cycles N rssStartKiB rssEndKiB seconds}. */
    public static void main(String[] args) throws IOException {
        int cycles = Integer.parseInt(args[0]);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(Long.parseLong(args[1]));
        Mamba1Config config = Mamba1Config.builder().dModel(8).dState(2).layers(1).build();
        for (int i = 0; i < WARM_UP; i++) cycle(config, i);
        long start = TestUtil.rssKiB(), t0 = System.nanoTime();
        int done = 0;
        while (done < cycles && System.nanoTime() < deadline) cycle(config, done++);
        System.out.printf("cycles %d %d %d %.1f%n", done, start, TestUtil.rssKiB(), (System.nanoTime() - t0) / 1e9);
    }

    private static void cycle(Mamba1Config config, int i) {
        try (MambaModel m = MambaModel.builder(config).inputDim(2).seed(i).build();
             MambaState s = m.newState(2);
             Tensor x = Tensor.of(Device.cpu(), new float[] {1, 2, 3, 4}, 2, 2);
             Tensor y = Tensor.allocate(Device.cpu(), DType.F32, 2, 8);
             Trainer t = Trainer.builder(m).batch(2).seqLen(2).build()) {
            m.step(s, x, y);
            m.prefill(s, new float[2 * 2 * 2], 2);
            t.stepMse(new float[2 * 2 * 2], new float[2 * 2 * 8]);
            t.exportOptimizerState();
            y.toArray();
        }
    }
}
