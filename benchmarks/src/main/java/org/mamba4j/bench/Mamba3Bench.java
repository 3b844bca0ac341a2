package org.mamba4j.bench;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.mamba4j.AdamW;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.Mamba3Config;
import org.mamba4j.MambaModel;
import org.mamba4j.MambaState;
import org.mamba4j.Trainer;

/**
 * Mamba-3 SISO speed at the official mixer defaults (d_state 128, headdim 64, expand 2), the points the
 * official Triton kernels are compared at (docs/benchmarks.md). Prints markdown tables.
 *
 * <pre>
 *   java ... org.mamba4j.bench.Mamba3Bench [cuda|cpu] [--quick] [--training-only] [--out FILE]
 * </pre>
 *
 * <ul>
 *   <li>decode: {@code stepTokens} of a language model (vocabulary 50,280, tied head; token in, logits copied
 *       out) at B = 1 and 64, CUDA graphs on; floor = backbone + head weight bytes / 4.26 TB/s;</li>
 *   <li>prefill: backbone {@code prefill} of T = 4096 float positions, B = 1 (the last output copied out);</li>
 *   <li>training: {@code Trainer.stepTokens} of the language model (embedding, backbone, tied head, next-token
 *       cross-entropy computed in row blocks), BPTT, clipping and AdamW — the official comparison point.</li>
 * </ul>
 * With {@code cpu}: the decode step of the default config ({@link Mamba3Config#defaults()}, float input) only.
 */
public final class Mamba3Bench {
    private static final double HBM = 4.26e12;
    private static final int VOCAB = 50280;

    private record Shape(String name, int dModel, int layers) {}

    private final boolean quick;
    private final Random rng = new Random(11);
    private final StringBuilder out = new StringBuilder();

    private Mamba3Bench(boolean quick) {
        this.quick = quick;
    }

    public static void main(String[] args) throws IOException {
        boolean cpu = false, quick = false, trainingOnly = false;
        Path outFile = null;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "cpu" -> cpu = true;
                case "cuda" -> cpu = false;
                case "--quick" -> quick = true;
                case "--training-only" -> trainingOnly = true;
                case "--out" -> outFile = Path.of(args[++i]);
                default -> throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        Mamba3Bench b = new Mamba3Bench(quick);
        if (cpu) {
            b.cpuStep();
        } else if (Device.cudaCount() == 0) {
            System.out.println("no CUDA device: " + Device.cudaUnavailableReason());
            return;
        } else {
            if (!trainingOnly) {
                b.decode();
                b.prefill();
            }
            b.training();
        }
        if (outFile != null) Files.writeString(outFile, b.out.toString());
    }

    private static Mamba3Config config(int dModel, int layers) {
        return Mamba3Config.builder().dModel(dModel).layers(layers).build();  // official mixer defaults
    }

    private void print(String s) {
        System.out.println(s);
        System.out.flush();
        out.append(s).append('\n');
    }

    /** Bytes of backbone weights one decode step must read: matrices in the storage type, vectors in f32. */
    private static double backboneBytes(MambaModel m, DType dt) {
        double bytes = 0;
        for (String name : m.parameterNames()) {
            if (name.contains("embedding") || name.startsWith("lm_head")) continue;
            long n = 1;
            for (long d : m.parameterShape(name)) n *= d;
            boolean matrix = name.endsWith("proj.weight");
            bytes += n * (matrix && (dt == DType.BF16 || dt == DType.F16) ? 2 : 4);
        }
        return bytes;
    }

    private float[] gaussian(int n) {
        float[] x = new float[n];
        for (int i = 0; i < n; i++) x[i] = (float) rng.nextGaussian();
        return x;
    }

    private void decode() {
        print("## Mamba-3 decode (LM, vocabulary 50,280, tied head, CUDA graphs) — " + Device.cuda(0).name());
        print("");
        print("| model | dtype | B | step us | tok/s | weight MB | of weight floor |");
        print("|---|---|---:|---:|---:|---:|---:|");
        Shape[] shapes = {new Shape("768×24", 768, 24), new Shape("1024×48", 1024, 48), new Shape("2048×48", 2048, 48)};
        for (Shape s : shapes) {
            for (DType dt : new DType[] {DType.F32, DType.BF16}) {
                try (MambaModel m = MambaModel.builder(config(s.dModel, s.layers)).vocabSize(VOCAB).device(Device.cuda(0))
                        .dtype(dt).seed(5).build()) {
                    m.setCudaGraphs(true);
                    double bytes = backboneBytes(m, dt) + (double) VOCAB * s.dModel * (dt == DType.F32 ? 4 : 2);  // + the head
                    for (int batch : new int[] {1, 64}) {
                        try (MambaState st = m.newState(batch)) {
                            int[][] ids = new int[8][batch];
                            for (int[] row : ids) for (int i = 0; i < batch; i++) row[i] = rng.nextInt(VOCAB);
                            float[] logits = new float[batch * VOCAB];
                            int[] k = {0};
                            int n = quick ? 20 : (batch == 1 ? 200 : 50);
                            double ms = Timing.medianMs(10, n, () -> {
                                m.stepTokens(st, ids[k[0]++ % 8], logits);
                                return 0;
                            });
                            double us = ms * 1e3;
                            print(String.format("| %s | %s | %d | %.1f | %.0f | %.0f | %.1f%% |", s.name, dt, batch, us,
                                    batch * 1e6 / us, bytes / 1e6, 100 * bytes / HBM * 1e6 / us));
                        }
                    }
                }
            }
        }
        print("");
    }

    private void prefill() {
        print("## Mamba-3 backbone prefill, B = 1, T = 4096 (float positions in, last output out)");
        print("");
        print("| model | dtype | ms | tok/s |");
        print("|---|---|---:|---:|");
        final int T = 4096;
        for (Shape s : new Shape[] {new Shape("1024×48", 1024, 48), new Shape("2048×48", 2048, 48)}) {
            for (DType dt : new DType[] {DType.F32, DType.BF16}) {
                try (MambaModel m = MambaModel.builder(config(s.dModel, s.layers)).inputDim(s.dModel).device(Device.cuda(0))
                        .dtype(dt).seed(5).build();
                     MambaState st = m.newState(1)) {
                    float[] x = gaussian(T * s.dModel);
                    double ms = Timing.medianMs(1, quick ? 3 : 7, () -> {
                        st.reset();
                        return m.prefill(st, x, T)[0];
                    });
                    print(String.format("| %s | %s | %.2f | %.0f |", s.name, dt, ms, T / ms * 1e3));
                }
            }
        }
        print("");
    }

    private void training() {
        print("## Mamba-3 training step (language model, vocabulary 50,280, tied head, next-token cross-entropy, clip 1.0,"
                + " AdamW; ids and targets copied from the host)");
        print("");
        print("| model | dtype | B × T | ms / step | tokens/s |");
        print("|---|---|---|---:|---:|");
        record Case(Shape shape, int batch, int seqLen) {}
        List<Case> cases = new ArrayList<>(List.of(new Case(new Shape("768×24", 768, 24), 8, 256),
                new Case(new Shape("768×24", 768, 24), 8, 2048)));
        if (!quick) cases.add(new Case(new Shape("2048×48", 2048, 48), 8, 2048));
        for (Case c : cases) {
            for (DType dt : new DType[] {DType.F32, DType.BF16}) {
                try (MambaModel model = MambaModel.builder(config(c.shape.dModel, c.shape.layers)).vocabSize(VOCAB)
                        .device(Device.cuda(0)).dtype(dt).seed(1).build();
                     Trainer t = Trainer.builder(model).batch(c.batch).seqLen(c.seqLen).adamW(AdamW.ofLearningRate(1e-4))
                             .clipGradNorm(1.0).build()) {
                    int n = c.batch * c.seqLen;
                    int[] ids = new int[n], targets = new int[n];
                    for (int i = 0; i < n; i++) ids[i] = rng.nextInt(VOCAB);
                    for (int i = 0; i < n; i++) targets[i] = (i + 1) % c.seqLen == 0 ? Trainer.DEFAULT_IGNORE_INDEX : ids[i + 1];
                    double ms = Timing.medianMs(2, quick ? 3 : 10, () -> t.stepTokens(ids, targets).loss());
                    print(String.format("| %s | %s | %d × %d | %.1f | %.0f |", c.shape.name, dt, c.batch, c.seqLen, ms,
                            n / ms * 1e3));
                }
            }
        }
        print("");
    }

    private void cpuStep() {
        Mamba3Config c = Mamba3Config.defaults();
        print("## Mamba-3 CPU step, default config " + c + " (float input = d_model), B = 1");
        print("");
        print("| threads | step us | tok/s |");
        print("|---:|---:|---:|");
        try (MambaModel m = MambaModel.builder(c).inputDim(c.dModel()).device(Device.cpu()).seed(3).build();
             MambaState st = m.newState(1)) {
            float[] x = gaussian(c.dModel()), y = new float[c.dModel()];
            double ms = Timing.medianMs(50, quick ? 100 : 1000, () -> {
                m.step(st, x, y);
                return y[0];
            });
            print(String.format("| %d | %.1f | %.0f |", Runtime.getRuntime().availableProcessors(), ms * 1e3, 1e3 / ms));
        }
        print("");
    }
}
