package org.mamba4j.lm;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.MambaState;
import org.mamba4j.Tensor;
import org.mamba4j.TestUtil;
import org.mamba4j.Trainer;

/**
 * The GPU soak of docs/reliability.md (scripts/device-soak.sh runs it). Two modes:
 * <ul>
 *   <li>{@code soak MINUTES} (default 10): round after round of batched generation (batch 1-16, prompts of 1-256
 *       tokens) on a BF16 language model of the 130m shape, prefill, five training steps of an F32 backbone, and
 *       every minute a reload of the language model from its checkpoint. Every 10 s (after a GC) it prints device
 *       memory in use, native host memory (VmRSS − committed heap), the Java heap in use and the last workload
 *       cycle's generation rate and a fixed probe's (see {@link #probeRate}). It fails (exit 1) on any error, or when
 *       {@link #verdict} finds memory growth over 64 MiB or a probe rate that moved by more than 5% (the medians of
 *       the second minute against the last; the mixed workload's rate is reported beside it).
 *   <li>{@code cycles N} (default 100,000): create / use / close cycles of a small model, state, tensors and
 *       trainer on the GPU; device memory in use must be back within 16 MiB of where it was after 1,000 cycles.
 * </ul>
 */
public final class GpuSoak {
    private static final long MIB = 1 << 20;

    private GpuSoak() {}

    public static void main(String[] args) throws Exception {
        Device gpu = Device.cuda(0);
        String mode = args.length > 0 ? args[0] : "soak";
        boolean ok = mode.equals("cycles") ? cycles(gpu, args.length > 1 ? Integer.parseInt(args[1]) : 100_000)
                : soak(gpu, args.length > 1 ? Integer.parseInt(args[1]) : 10);
        System.out.println(ok ? "soak: PASS" : "soak: FAIL");
        System.exit(ok ? 0 : 1);
    }

    private static long deviceUsed(Device gpu) {
        return gpu.totalMemory() - gpu.freeMemory();
    }

    private static boolean soak(Device gpu, int minutes) throws Exception {
        Path file = Files.createTempFile("soak-lm", ".safetensors");
        Mamba1Config lmShape = Mamba1Config.builder().dModel(768).dState(16).layers(24).build();
        try (MambaModel init = MambaModel.builder(lmShape).vocabSize(50280).seed(1).build()) {
            init.save(file);  // the checkpoint every reload reads (F32 on disk, BF16 on the GPU)
        }
        Random rng = new Random(7);
        long start = System.nanoTime(), end = start + minutes * 60_000_000_000L;
        List<long[]> samples = new ArrayList<>();  // {second, device bytes used, native bytes, heap bytes used after GC}
        List<double[]> cycleStats = new ArrayList<>();  // per workload cycle: {end second, tokens, generate seconds}
        List<double[]> probes = new ArrayList<>();  // per sample: {second, probe tokens/s (best of 5)}
        int[][] probePrompts = new int[4][64];
        for (int[] p : probePrompts) for (int i = 0; i < p.length; i++) p[i] = rng.nextInt(50277);
        long tokens = 0, genNanos = 0, nextSample = start + 10_000_000_000L, nextReload = start + 60_000_000_000L;
        MambaLM lm = new MambaLM(MambaModel.load(file, gpu, DType.BF16), 50277, null);
        try (MambaModel backbone = MambaModel.builder(Mamba1Config.builder().dModel(512).layers(8).build()).inputDim(64)
                .device(gpu).seed(2).build();
             Trainer trainer = Trainer.builder(backbone).batch(8).seqLen(128).clipGradNorm(1).build()) {
            float[] x = TestUtil.random(rng, 8 * 128 * 64, 1), target = TestUtil.random(rng, 8 * 128 * 512, 1);
            int[] batches = {1, 2, 4, 8, 16}, lengths = {1, 17, 64, 256};
            int cycle = batches.length * lengths.length;  // rounds until the mix of batches and lengths repeats
            for (int round = 0; System.nanoTime() < end; round++) {
                int b = batches[round % batches.length], t = lengths[(round / batches.length) % lengths.length];
                int[][] prompts = new int[b][t];
                for (int[] p : prompts) for (int i = 0; i < t; i++) p[i] = rng.nextInt(50277);
                long[] made = {0};
                long g0 = System.nanoTime();
                lm.generate(prompts, Sampling.ofTemperature(0.8).seed(round).maxNewTokens(32), (row, tok) -> made[0]++);
                genNanos += System.nanoTime() - g0;
                tokens += made[0];
                try (MambaState s = lm.model().newState(b)) {
                    lm.model().prefillTokens(s, new int[b * t], t, new float[b * 50280]);
                }
                for (int i = 0; i < 5; i++) trainer.stepMse(x, target);
                long now = System.nanoTime();
                if ((round + 1) % cycle == 0) {
                    cycleStats.add(new double[] {(now - start) / 1e9, tokens, genNanos / 1e9});
                    tokens = 0;
                    genNanos = 0;
                }
                if (now >= nextReload) {
                    lm.close();
                    lm = new MambaLM(MambaModel.load(file, gpu, DType.BF16), 50277, null);
                    nextReload += 60_000_000_000L;
                }
                if (now >= nextSample) {
                    System.gc();  // heap garbage is not a leak: memory is read after a collection
                    Runtime rt = Runtime.getRuntime();
                    long heapUsed = rt.totalMemory() - rt.freeMemory(), nativeBytes = TestUtil.rssKiB() * 1024 - rt.totalMemory();
                    long sec = (now - start) / 1_000_000_000L;
                    samples.add(new long[] {sec, deviceUsed(gpu), nativeBytes, heapUsed});
                    double probe = probeRate(lm, probePrompts);
                    probes.add(new double[] {sec, probe});
                    double[] c = cycleStats.isEmpty() ? null : cycleStats.get(cycleStats.size() - 1);
                    System.out.printf("t=%4d s  device used %6d MiB  native %6d MiB  heap %5d MiB  last cycle %7.1f tokens/s"
                                    + "  probe %7.1f tokens/s%n", sec, deviceUsed(gpu) / MIB, nativeBytes / MIB, heapUsed / MIB,
                            c == null ? 0 : c[1] / c[2], probe);
                    nextSample += 10_000_000_000L;
                }
            }
        } finally {
            lm.close();
            Files.deleteIfExists(file);
        }
        return verdict(samples, cycleStats, probes, minutes * 60);
    }

    /**
     * The throughput instrument: one fixed greedy generation (4 prompts of 64 tokens, 32 new tokens each) run five
     * times back to back, the best of the five in tokens per second. The same work every time, and the best of
     * repeats, so that host scheduling jitter (the mixed workload's cycles spread ±10% on the device machine)
     * does not hide or fake a slowdown of the library: a leak, fragmentation or a growing cache slows every repeat.
     */
    private static double probeRate(MambaLM lm, int[][] prompts) {
        long best = Long.MAX_VALUE;
        for (int i = 0; i < 5; i++) {
            long t0 = System.nanoTime();
            lm.generate(prompts, Sampling.greedy().maxNewTokens(32), (row, tok) -> {});
            best = Math.min(best, System.nanoTime() - t0);
        }
        return prompts.length * 32 / (best / 1e9);
    }

    /**
     * The first minute warms up (graphs, pools). Memory: the largest reading of the second minute against the largest
     * of the last (device memory in use; native = VmRSS − the committed Java heap; Java heap in use after a GC).
     * Throughput: generated tokens per second spent in generate, over the whole workload cycles that ended in the
     * second minute and in the last one (every cycle has the same mix of batch sizes and prompt lengths).
     */
    private static boolean verdict(List<long[]> samples, List<double[]> cycleStats, List<double[]> probes, int seconds) {
        if (seconds < 180 || samples.size() < 12) {
            System.out.println("soak: too short for a verdict (" + samples.size() + " samples)");
            return false;
        }
        long[] early = new long[4], late = new long[4];
        for (long[] s : samples)
            for (int k = 1; k < 4; k++) {
                if (s[0] > 60 && s[0] <= 120) early[k] = Math.max(early[k], s[k]);
                if (s[0] > seconds - 60) late[k] = Math.max(late[k], s[k]);
            }
        double[] first = {0, 0}, last = {0, 0};
        for (double[] c : cycleStats) {
            double[] into = c[0] > 60 && c[0] <= 120 ? first : c[0] > seconds - 60 ? last : null;
            if (into != null) {
                into[0] += c[1];
                into[1] += c[2];
            }
        }
        double firstRate = first[0] / first[1], lastRate = last[0] / last[1], change = lastRate / firstRate - 1;
        List<Double> probeFirst = new ArrayList<>(), probeLast = new ArrayList<>();
        for (double[] p : probes) {
            if (p[0] > 60 && p[0] <= 120) probeFirst.add(p[1]);
            if (p[0] > seconds - 60) probeLast.add(p[1]);
        }
        double pFirst = median(probeFirst), pLast = median(probeLast), probeChange = pLast / pFirst - 1;
        System.out.printf("soak: device %d -> %d MiB, native %d -> %d MiB, heap after GC %d -> %d MiB (second minute -> last"
                        + " minute, largest readings); probe tokens/s %.1f -> %.1f (%+.1f%%, medians); mixed-workload generate"
                        + " tokens/s %.1f -> %.1f (%+.1f%%, reported only); %d workload cycles%n",
                early[1] / MIB, late[1] / MIB, early[2] / MIB, late[2] / MIB, early[3] / MIB, late[3] / MIB, pFirst, pLast,
                100 * probeChange, firstRate, lastRate, 100 * change, cycleStats.size());
        return late[1] - early[1] <= 64 * MIB && late[2] - early[2] <= 64 * MIB && late[3] - early[3] <= 64 * MIB
                && Math.abs(probeChange) <= 0.05;
    }

    private static double median(List<Double> v) {
        if (v.isEmpty()) return Double.NaN;
        List<Double> s = new ArrayList<>(v);
        s.sort(null);
        int n = s.size();
        return n % 2 == 1 ? s.get(n / 2) : (s.get(n / 2 - 1) + s.get(n / 2)) / 2;
    }

    private static boolean cycles(Device gpu, int n) {
        Mamba1Config c = Mamba1Config.builder().dModel(64).dState(8).layers(2).build();
        long base = 0;
        for (int i = 0; i < n; i++) {
            try (MambaModel m = MambaModel.builder(c).inputDim(4).device(gpu).seed(i).build();
                 MambaState s = m.newState(2);
                 Tensor x = Tensor.of(gpu, new float[8], 2, 4);
                 Tensor y = Tensor.allocate(gpu, DType.F32, 2, 64);
                 Trainer t = Trainer.builder(m).batch(2).seqLen(4).build()) {
                m.step(s, x, y);
                t.stepMse(new float[2 * 4 * 4], new float[2 * 4 * 64]);
            }
            if (i == 999) base = deviceUsed(gpu);
            if ((i + 1) % 10_000 == 0) System.out.printf("cycles %d: device used %d MiB%n", i + 1, deviceUsed(gpu) / MIB);
        }
        long growth = deviceUsed(gpu) - base;
        System.out.printf("cycles: %d, device memory %+d MiB since cycle 1,000%n", n, growth / MIB);
        return growth <= 16 * MIB;
    }
}
