package org.mamba4j.bench;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.MambaState;

/**
 * Decode and prefill speed of Mamba-1 on a CUDA device, against the HBM floor.
 *
 * <pre>
 *   java ... org.mamba4j.bench.GpuDecodeBench [--lmhead FILE] [--quick] [--out FILE]
 * </pre>
 *
 * <p>Models are randomly initialised (seeded) in the shapes of the public checkpoints — 130m, 370m, 1.4b,
 * 2.8b: d_model 768/1024/2048/2560 with 24/48/48/64 layers, d_state 16, expand 2, no input projection.
 * A decode step goes through the public API: input copied to the device, the step (replayed from a CUDA
 * graph when graphs are on), output copied back — so host↔device transfers and two synchronisations are
 * part of every number. The floor is the bytes of weights one token must read (matrices in the storage
 * type, vectors in f32) over 4.26 TB/s, the H200's measured copy rate.
 *
 * <p>The API has no LM head yet, so the 50,280 × d_model head matvec is timed by the CUDA kernel test
 * program ({@code kernels/test/cuda/kernel_test --lmhead FILE}, the same gemv kernel libmamba uses) and
 * added here from that file: "+head" columns = backbone step + head matvec, floor including the head.
 */
public final class GpuDecodeBench {
    private static final double HBM = 4.26e12;
    private static final int VOCAB = 50280;

    private record Shape(String name, int dModel, int layers) {}

    private static final Shape[] SHAPES = {
        new Shape("130m", 768, 24), new Shape("370m", 1024, 48), new Shape("1.4b", 2048, 48), new Shape("2.8b", 2560, 64)
    };

    private final StringBuilder out = new StringBuilder();
    private final Map<String, Double> headUs = new HashMap<>();
    private final boolean quick;
    private final Random rng = new Random(42);

    private GpuDecodeBench(boolean quick) {
        this.quick = quick;
    }

    public static void main(String[] args) throws IOException {
        Path lmhead = null, outFile = null;
        boolean quick = false;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--lmhead" -> lmhead = Path.of(args[++i]);
                case "--out" -> outFile = Path.of(args[++i]);
                case "--quick" -> quick = true;
                default -> throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        if (Device.cudaCount() == 0) {
            System.out.println("no CUDA device: " + Device.cudaUnavailableReason());
            return;
        }
        GpuDecodeBench b = new GpuDecodeBench(quick);
        if (lmhead != null && Files.exists(lmhead)) b.readHead(lmhead);
        b.run();
        if (outFile != null) Files.writeString(outFile, b.out.toString());
    }

    private void readHead(Path file) throws IOException {
        for (String line : Files.readAllLines(file)) {
            String[] f = line.trim().split("\t");
            if (f.length == 3) headUs.put(f[0] + "/" + f[1], Double.parseDouble(f[2]));
        }
    }

    private void print(String s) {
        System.out.println(s);
        System.out.flush();
        out.append(s).append('\n');
    }

    private static Mamba1Config config(Shape s) {
        return Mamba1Config.builder().dModel(s.dModel).layers(s.layers).dState(16).dConv(4).expand(2).build();
    }

    /** Bytes of weights one decode step reads: linear matrices in the storage type, everything else f32. */
    private static double weightBytes(MambaModel m, DType dt) {
        double bytes = 0;
        for (String name : m.parameterNames()) {
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

    /** Median microseconds of one step over `n` timed steps after `warm` untimed ones. */
    private static double stepUs(MambaModel m, MambaState s, FloatBuffer x, FloatBuffer y, int warm, int n) {
        for (int i = 0; i < warm; i++) m.step(s, x, y);
        double[] t = new double[n];
        for (int i = 0; i < n; i++) {
            long t0 = System.nanoTime();
            m.step(s, x, y);
            t[i] = (System.nanoTime() - t0) / 1e3;
        }
        Arrays.sort(t);
        return t[n / 2];
    }

    private void run() {
        print("# GPU decode benchmark — " + Device.cuda(0).name() + " (floor: weight bytes / 4.26 TB/s)");
        print("");
        print("Random seeded weights in checkpoint shapes; every step goes through the public API (copies in and"
                + " out, synchronised). \"+head\": plus the 50,280 x d_model LM-head matvec timed by kernel_test"
                + (headUs.isEmpty() ? " (not available in this run)." : "."));
        print("");
        print("## B = 1 decode latency");
        print("");
        print("| model | dtype | graphs | weights MB | step us | tok/s | of floor | +head us | +head tok/s | +head of floor |");
        print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|");
        List<String> batchRows = new ArrayList<>();
        for (Shape shape : SHAPES) {
            for (DType dt : new DType[] {DType.F32, DType.BF16}) {
                long t0 = System.nanoTime();
                try (MambaModel m = MambaModel.builder(config(shape)).device(Device.cuda(0)).dtype(dt).seed(7).build()) {
                    System.err.printf("built %s %s in %.1f s%n", shape.name, dt, (System.nanoTime() - t0) / 1e9);
                    double bytes = weightBytes(m, dt);
                    double floorUs = bytes / HBM * 1e6;
                    Double head = headUs.get(shape.dModel + "/" + (dt == DType.F32 ? "f32" : "bf16"));
                    double headBytes = (double) VOCAB * shape.dModel * (dt == DType.F32 ? 4 : 2);
                    int n = quick ? 30 : (shape.dModel >= 2048 ? 100 : 300);
                    for (boolean graphs : new boolean[] {false, true}) {
                        m.setCudaGraphs(graphs);
                        try (MambaState s = m.newState(1)) {
                            FloatBuffer x = direct(shape.dModel), y = direct(shape.dModel);
                            double us = stepUs(m, s, x, y, 20, n);
                            String headCols = head == null ? "| - | - | - |"
                                    : String.format("| %.1f | %.0f | %.1f%% |", us + head, 1e6 / (us + head),
                                            100 * (bytes + headBytes) / HBM * 1e6 / (us + head));
                            print(String.format("| %s | %s | %s | %.0f | %.1f | %.0f | %.1f%% %s", shape.name, dt,
                                    graphs ? "on" : "off", bytes / 1e6, us, 1e6 / us, 100 * floorUs / us, headCols));
                        }
                    }
                    if (dt == DType.BF16 || !quick) {
                        for (int batch : new int[] {16, 64}) {
                            m.setCudaGraphs(true);
                            try (MambaState s = m.newState(batch)) {
                                FloatBuffer x = direct(batch * shape.dModel), y = direct(batch * shape.dModel);
                                double us = stepUs(m, s, x, y, 10, quick ? 20 : 60);
                                batchRows.add(String.format("| %s | %s | %d | %.1f | %.0f | %.1f%% |", shape.name, dt,
                                        batch, us, batch * 1e6 / us, 100 * floorUs / us));
                            }
                        }
                    }
                    if (shape.name.equals("370m")) prefill(m, shape, dt);
                }
            }
        }
        print("");
        print("## Batched decode (graphs on): aggregate tokens/s");
        print("");
        print("| model | dtype | B | step us | tok/s | of weight floor |");
        print("|---|---|---:|---:|---:|---:|");
        batchRows.forEach(this::print);
        print("");
        print("## Prefill, 370m shape, B = 1");
        print("");
        print("| dtype | T | ms | tok/s |");
        print("|---|---:|---:|---:|");
        prefillRows.forEach(this::print);
    }

    private final List<String> prefillRows = new ArrayList<>();

    private void prefill(MambaModel m, Shape shape, DType dt) {
        for (int T : new int[] {128, 1024, 4096}) {
            float[] x = new float[T * shape.dModel];
            for (int i = 0; i < x.length; i++) x[i] = (float) (rng.nextDouble() * 2 - 1);
            try (MambaState s = m.newState(1)) {
                m.prefill(s, x, T);  // warm-up: workspaces, cuBLAS heuristics
                int reps = quick ? 3 : 7;
                double[] t = new double[reps];
                for (int r = 0; r < reps; r++) {
                    s.reset();
                    long t0 = System.nanoTime();
                    m.prefill(s, x, T);
                    t[r] = (System.nanoTime() - t0) / 1e6;
                }
                Arrays.sort(t);
                double ms = t[reps / 2];
                prefillRows.add(String.format("| %s | %d | %.2f | %.0f |", dt, T, ms, T / ms * 1e3));
            }
        }
    }
}
