package org.mamba4j.bench;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.GemmMode;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.MambaState;

/**
 * Decode and prefill speed of Mamba-1 on a CUDA device, against the HBM floor. Prints markdown tables.
 *
 * <pre>
 *   java ... org.mamba4j.bench.GpuDecodeBench [--quick] [--mode DETERMINISTIC|CUBLAS_FAST|CUBLAS_PEDANTIC] [--dtype F32|BF16]
 *       [--batches 2,16,64 | none]
 *       [--out FILE] [--json FILE]
 * </pre>
 *
 * <p>{@code --json FILE} also writes every timing in JMH's JSON format (median µs per step with a 99.9% error, see
 * {@link Timing}; secondary metric {@code floor} = the floor in µs), for {@link BenchCompare} against
 * {@code benchmarks/baselines/nvidia-h200.json} and for {@link BenchChart}.
 *
 * <p>Models are language models with random seeded weights in the shapes of the public checkpoints —
 * 130m, 370m, 1.4b, 2.8b: d_model 768/1024/2048/2560 with 24/48/48/64 layers, d_state 16, expand 2,
 * vocabulary 50,280 with a tied LM head. Every call goes through the public API: inputs copied to the
 * device, the step (replayed from a CUDA graph when graphs are on), outputs copied back — host↔device
 * transfers and their synchronisations are part of every number.
 * <ul>
 *   <li>"backbone": {@code step} with float inputs → d_model outputs (embedding and head skipped);</li>
 *   <li>"LM": {@code stepTokens}: token → embedding → backbone → 50,280 × d_model head → logits copied out.</li>
 * </ul>
 * The floor is the bytes of weights one step must read (matrices in the storage type, vectors in f32;
 * the head once more for "LM") over 4.26 TB/s, the H200's measured device copy rate.
 */
public final class GpuDecodeBench {
    private static final double HBM = 4.26e12;
    private static final int VOCAB = 50280;

    private record Shape(String name, int dModel, int layers) {}

    private static final Shape[] SHAPES = {
        new Shape("130m", 768, 24), new Shape("370m", 1024, 48), new Shape("1.4b", 2048, 48), new Shape("2.8b", 2560, 64)
    };

    private final StringBuilder out = new StringBuilder();
    private final boolean quick;
    private final Random rng = new Random(42);
    private final List<String> batchRows = new ArrayList<>();
    private final List<String> prefillRows = new ArrayList<>();
    private final List<String> memoryRows = new ArrayList<>();
    /** Every model's GemmMode (--mode; default the models' default, CUBLAS_FAST). */
    private static GemmMode mode = GemmMode.CUBLAS_FAST;
    /** The storage types measured (--dtype narrows it to one). */
    private static DType[] dtypes = {DType.F32, DType.BF16};
    /** The batch sizes of the batched table (--batches 2,16 narrows it; --batches none skips it and the prefill). */
    private static int[] batches = {2, 4, 8, 16, 64, 256};
    private final List<BenchResult> results = new ArrayList<>();

    private GpuDecodeBench(boolean quick) {
        this.quick = quick;
    }

    public static void main(String[] args) throws IOException {
        Path outFile = null, jsonFile = null;
        boolean quick = false;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--out" -> outFile = Path.of(args[++i]);
                case "--json" -> jsonFile = Path.of(args[++i]);
                case "--quick" -> quick = true;
                case "--mode" -> mode = GemmMode.valueOf(args[++i]);
                case "--dtype" -> dtypes = new DType[] {DType.valueOf(args[++i])};
                case "--batches" -> batches = parseBatches(args[++i]);
                default -> throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        if (Device.cudaCount() == 0) {
            System.out.println("no CUDA device: " + Device.cudaUnavailableReason());
            return;
        }
        GpuDecodeBench b = new GpuDecodeBench(quick);
        b.run();
        if (outFile != null) Files.writeString(outFile, b.out.toString());
        if (jsonFile != null) JmhJson.write(jsonFile, b.results);
    }

    private static int[] parseBatches(String list) {
        if (list.equals("none")) return new int[0];
        try {
            int[] b = Arrays.stream(list.split(",")).mapToInt(v -> Integer.parseInt(v.trim())).toArray();
            if (Arrays.stream(b).anyMatch(v -> v < 1)) throw new NumberFormatException("a batch below 1");
            return b;
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("--batches takes batch sizes ≥ 1 separated by commas, or none: " + list, e);
        }
    }

    /** Records one timing for --json: benchmark GpuDecodeBench.NAME with these parameters, µs per operation. */
    private void record(String name, Timing t, double floorUs, String... params) {
        Map<String, String> p = new LinkedHashMap<>();
        for (int i = 0; i < params.length; i += 2) p.put(params[i], params[i + 1]);
        Map<String, Double> secondary = floorUs > 0 ? Map.of("floor", floorUs) : Map.of();
        results.add(new BenchResult(GpuDecodeBench.class.getName() + "." + name, "avgt", p, t.median(), t.error(), "us/op", secondary));
    }

    private void print(String s) {
        System.out.println(s);
        System.out.flush();
        out.append(s).append('\n');
    }

    private static Mamba1Config config(Shape s) {
        return Mamba1Config.builder().dModel(s.dModel).layers(s.layers).dState(16).dConv(4).expand(2).build();
    }

    /** Bytes of backbone weights one decode step reads: linear matrices in the storage type, the rest f32. */
    private static double backboneBytes(MambaModel m, DType dt) {
        double bytes = 0;
        for (String name : m.parameterNames()) {
            if (name.contains("embeddings") || name.startsWith("lm_head")) continue;
            long n = 1;
            for (long d : m.parameterShape(name)) n *= d;
            boolean matrix = name.endsWith("proj.weight");
            bytes += n * (matrix && (dt == DType.BF16 || dt == DType.F16) ? 2 : 4);
        }
        return bytes;
    }

    private FloatBuffer direct(int n) {
        FloatBuffer b = ByteBuffer.allocateDirect(4 * n).order(ByteOrder.nativeOrder()).asFloatBuffer();
        for (int i = 0; i < n; i++) b.put(i, (float) (rng.nextDouble() * 2 - 1));
        return b;
    }

    private int[] tokens(int n) {
        int[] ids = new int[n];
        for (int i = 0; i < n; i++) ids[i] = rng.nextInt(VOCAB);
        return ids;
    }

    /** Microseconds of one backbone step over n timed steps after warm-up (median and its error). */
    private static Timing stepUs(MambaModel m, MambaState s, FloatBuffer x, FloatBuffer y, int warm, int n) {
        for (int i = 0; i < warm; i++) m.step(s, x, y);
        double[] t = new double[n];
        for (int i = 0; i < n; i++) {
            long t0 = System.nanoTime();
            m.step(s, x, y);
            t[i] = (System.nanoTime() - t0) / 1e3;
        }
        return Timing.of(t);
    }

    /** Microseconds of one LM step (token ids in, logits out; median and its error). */
    private Timing lmStepUs(MambaModel m, MambaState s, int warm, int n) {
        int B = s.batch();
        float[] logits = new float[B * VOCAB];
        int[][] ids = new int[8][];
        for (int i = 0; i < ids.length; i++) ids[i] = tokens(B);
        for (int i = 0; i < warm; i++) m.stepTokens(s, ids[i % 8], logits);
        double[] t = new double[n];
        for (int i = 0; i < n; i++) {
            long t0 = System.nanoTime();
            m.stepTokens(s, ids[i % 8], logits);
            t[i] = (System.nanoTime() - t0) / 1e3;
        }
        return Timing.of(t);
    }

    private void run() {
        print("# GPU decode benchmark — " + Device.cuda(0).name() + ", GemmMode " + mode
                + " (floor: weight bytes / 4.26 TB/s)");
        print("");
        print("Random seeded language models in checkpoint shapes (vocabulary 50,280, tied head). Every step goes"
                + " through the public API, host copies and synchronisation included. backbone: float step;"
                + " LM: token in, embedding + backbone + LM head, 50,280 logits copied out.");
        print("");
        print("## B = 1 decode latency");
        print("");
        print("| model | dtype | graphs | backbone MB | backbone us | tok/s | of floor | LM MB | LM us | LM tok/s | LM of floor |");
        print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for (Shape shape : SHAPES) {
            for (DType dt : dtypes) {
                long t0 = System.nanoTime();
                long freeBefore = Device.cuda(0).freeMemory();
                try (MambaModel m = MambaModel.builder(config(shape)).vocabSize(VOCAB).device(Device.cuda(0)).dtype(dt)
                        .gemmMode(mode).seed(7).build()) {
                    System.err.printf("built %s %s in %.1f s%n", shape.name, dt, (System.nanoTime() - t0) / 1e9);
                    long built = freeBefore - Device.cuda(0).freeMemory();
                    double bytes = backboneBytes(m, dt);
                    double lmBytes = bytes + (double) VOCAB * shape.dModel * (dt == DType.F32 ? 4 : 2);
                    int n = quick ? 30 : (shape.dModel >= 2048 ? 100 : 300);
                    for (boolean graphs : new boolean[] {false, true}) {
                        m.setCudaGraphs(graphs);
                        try (MambaState s = m.newState(1)) {
                            FloatBuffer x = direct(shape.dModel), y = direct(shape.dModel);
                            Timing backbone = stepUs(m, s, x, y, 20, n);
                            s.reset();
                            Timing lmTiming = lmStepUs(m, s, 20, n);
                            double us = backbone.median(), lm = lmTiming.median();
                            String g = graphs ? "on" : "off";
                            record("step", backbone, bytes / HBM * 1e6, "model", shape.name, "dtype", dt.name(), "graphs", g, "batch", "1");
                            record("stepTokens", lmTiming, lmBytes / HBM * 1e6, "model", shape.name, "dtype", dt.name(), "graphs", g, "batch", "1");
                            print(String.format("| %s | %s | %s | %.0f | %.1f | %.0f | %.1f%% | %.0f | %.1f | %.0f | %.1f%% |",
                                    shape.name, dt, graphs ? "on" : "off", bytes / 1e6, us, 1e6 / us,
                                    100 * bytes / HBM * 1e6 / us, lmBytes / 1e6, lm, 1e6 / lm,
                                    100 * lmBytes / HBM * 1e6 / lm));
                        }
                    }
                    m.setCudaGraphs(true);
                    for (int batch : batches) {  // 2…8: the gemv's batched rows; 16+: cuBLAS
                        try (MambaState s = m.newState(batch)) {
                            FloatBuffer x = direct(batch * shape.dModel), y = direct(batch * shape.dModel);
                            Timing backbone = stepUs(m, s, x, y, 10, quick ? 20 : 60);
                            s.reset();
                            Timing lmTiming = lmStepUs(m, s, 5, quick ? 10 : 30);
                            double us = backbone.median(), lm = lmTiming.median();
                            String b = Integer.toString(batch);
                            record("step", backbone, bytes / HBM * 1e6, "model", shape.name, "dtype", dt.name(), "graphs", "on", "batch", b);
                            record("stepTokens", lmTiming, 0, "model", shape.name, "dtype", dt.name(), "graphs", "on", "batch", b);
                            batchRows.add(String.format("| %s | %s | %d | %.1f | %.0f | %.1f%% | %.1f | %.0f |", shape.name,
                                    dt, batch, us, batch * 1e6 / us, 100 * bytes / HBM * 1e6 / us, lm, batch * 1e6 / lm));
                        }
                    }
                    if (shape.name.equals("370m") && batches.length > 0) prefill(m, shape, dt);
                    long used = freeBefore - Device.cuda(0).freeMemory();
                    memoryRows.add(String.format("| %s | %s | %,d | %.2f | %.2f |", shape.name, dt, m.parameterCount(),
                            (double) built / m.parameterCount(), (double) used / m.parameterCount()));
                }
            }
        }
        print("");
        print("## Batched decode (graphs on): aggregate tokens/s");
        print("");
        print("| model | dtype | B | backbone step us | backbone tok/s | of weight floor | LM step us | LM tok/s |");
        print("|---|---|---:|---:|---:|---:|---:|---:|");
        batchRows.forEach(this::print);
        print("");
        print("## Device memory per parameter (free-memory difference: after build; after the runs above, graphs and"
                + " workspaces included, states closed)");
        print("");
        print("| model | dtype | parameters | bytes/param built | bytes/param after use |");
        print("|---|---|---:|---:|---:|");
        memoryRows.forEach(this::print);
        print("");
        print("## Prefill, 370m shape, B = 1 (prefillTokens: ids in, last position's logits out)");
        print("");
        print("| dtype | T | ms | tok/s |");
        print("|---|---:|---:|---:|");
        prefillRows.forEach(this::print);
    }

    private void prefill(MambaModel m, Shape shape, DType dt) {
        float[] logits = new float[VOCAB];
        for (int T : new int[] {128, 1024, 4096}) {
            int[] ids = tokens(T);
            try (MambaState s = m.newState(1)) {
                m.prefillTokens(s, ids, T, logits);  // warm-up: workspaces, cuBLAS heuristics
                int reps = quick ? 3 : 7;
                double[] t = new double[reps];
                for (int r = 0; r < reps; r++) {
                    s.reset();
                    long t0 = System.nanoTime();
                    m.prefillTokens(s, ids, T, logits);
                    t[r] = (System.nanoTime() - t0) / 1e6;
                }
                Timing timing = Timing.of(t);
                double ms = timing.median();
                record("prefillTokens", new Timing(ms * 1e3, timing.error() * 1e3, reps), 0, "model", shape.name, "dtype", dt.name(),
                        "T", Integer.toString(T));
                prefillRows.add(String.format("| %s | %d | %.2f | %.0f |", dt, T, ms, T / ms * 1e3));
            }
        }
    }
}
