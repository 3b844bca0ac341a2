package org.mamba4j.bench;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Random;
import java.util.function.DoubleSupplier;
import org.mamba4j.AdamW;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.Mamba1Config;
import org.mamba4j.Mamba3Config;
import org.mamba4j.MambaModel;
import org.mamba4j.ModelConfig;
import org.mamba4j.Trainer;

/**
 * Mamba-1 (and Mamba-3 LM: keys {@code m3lm-…}, official mixer defaults) training step time (forward + backward + clip 1.0 + AdamW; inputs/targets or ids copied from the host,
 * loss read back every step) on a CUDA device, or the CPU with argument {@code cpu}, with model-FLOPs utilisation.
 * Prints a markdown table.
 * <pre>java ... org.mamba4j.bench.GpuTrainBench [cuda|cpu] [--only SUBSTRING] [--dtype F32|BF16|F16] [--steps N]
 *     [--warmup N] [--graphs]</pre>
 * {@code --graphs} turns on whole-step CUDA graphs ({@link Trainer#setStepGraphs}).
 * {@code --only} matches a case key such as {@code bb-768x24-8x256} (backbone) or {@code lm-768x24-8x2048};
 * the Mamba-3 cases ({@code m3lm-768x24-8x2048}) run only when {@code --only} names them.
 * Backbone cases train {@code stepMse} on float inputs; LM cases ({@code lm} in the name: vocabulary 50,280, tied
 * head) train {@code stepTokens} with next-token cross-entropy. MFU = 6 × parameters × tokens / step time /
 * {@value #PEAK_TFLOPS} TFLOP/s (the H200's dense bf16 rate measured by a cuBLAS GEMM; the F32 rows use the same
 * denominator, so they read as a fraction of what the GPU offers, not of its f32 peak).
 */
public final class GpuTrainBench {
    static final double PEAK_TFLOPS = 780;
    private static final int VOCAB = 50_280;

    private record Case(String name, int dModel, int layers, int inputDim, int batch, int seqLen, boolean lm, boolean mamba3) {
        Case(String name, int dModel, int layers, int inputDim, int batch, int seqLen, boolean lm) {
            this(name, dModel, layers, inputDim, batch, seqLen, lm, false);
        }

        String key() {
            return (mamba3 ? "m3lm-" : lm ? "lm-" : "bb-") + dModel + "x" + layers + "-" + batch + "x" + seqLen;
        }

        ModelConfig config() {
            return mamba3 ? Mamba3Config.builder().dModel(dModel).layers(layers).build()
                          : Mamba1Config.builder().dModel(dModel).layers(layers).build();
        }
    }

    private static final Case[] CASES = {
        new Case("default 128×3", 128, 3, 32, 16, 64, false),
        new Case("256×4", 256, 4, 32, 16, 64, false),
        new Case("mamba-rs default, T=32", 128, 3, 32, 1, 32, false),
        new Case("130m-shaped 768×24", 768, 24, 768, 8, 256, false),
        new Case("130m-shaped 768×24", 768, 24, 768, 8, 2048, false),
        new Case("130m-shaped 768×24", 768, 24, 768, 8, 8192, false),
        new Case("130m lm 768×24", 768, 24, 0, 8, 256, true),
        new Case("130m lm 768×24", 768, 24, 0, 8, 2048, true),
        new Case("2048×48 lm", 2048, 48, 0, 8, 2048, true),
        new Case("mamba-3 lm 768×24", 768, 24, 0, 8, 256, true, true),
        new Case("mamba-3 lm 768×24", 768, 24, 0, 8, 2048, true, true),
    };

    public static void main(String[] args) {
        boolean cpu = false;
        String only = null;
        List<DType> dtypes = new ArrayList<>();
        int steps = 20, warmup = 3;
        boolean graphs = false;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "cpu" -> cpu = true;
                case "cuda" -> cpu = false;
                case "--only" -> only = args[++i];
                case "--dtype" -> dtypes.add(DType.valueOf(args[++i].toUpperCase(Locale.ROOT)));
                case "--steps" -> steps = Integer.parseInt(args[++i]);
                case "--warmup" -> warmup = Integer.parseInt(args[++i]);
                case "--graphs" -> graphs = true;
                default -> throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        Device device = cpu ? Device.cpu() : Device.cuda(0);  // after the arguments: "cpu" needs no CUDA device
        if (dtypes.isEmpty()) dtypes = device.isCpu() ? List.of(DType.F32) : List.of(DType.F32, DType.BF16);
        System.out.printf("| model | dtype | B × T | params | ms / step (median of %d) | tokens/s | MFU |%n", steps);
        System.out.println("|---|---|---|---:|---:|---:|---:|");
        Random rng = new Random(3);
        for (Case c : CASES) {
            // Mamba-3 cases only when asked for by name ("m3lm"), so that "lm-768x24" means the Mamba-1 LM alone
            if (c.mamba3 != (only != null && only.contains("m3")) || (only != null && !c.key().contains(only))) continue;
            for (DType dtype : dtypes) run(device, c, dtype, steps, warmup, graphs, rng);
        }
    }

    private static void run(Device device, Case c, DType dtype, int steps, int warmup, boolean graphs, Random rng) {
        MambaModel.Builder mb = MambaModel.builder(c.config()).device(device).dtype(dtype).seed(1);
        mb = c.lm ? mb.vocabSize(VOCAB) : mb.inputDim(c.inputDim);
        int n = c.batch * c.seqLen;
        try (MambaModel model = mb.build();
             Trainer t = Trainer.builder(model).batch(c.batch).seqLen(c.seqLen)
                     .adamW(AdamW.ofLearningRate(1e-4)).clipGradNorm(1.0).stepGraphs(graphs).build()) {
            DoubleSupplier step;
            if (c.lm) {
                int[] ids = new int[n], targets = new int[n];
                for (int i = 0; i < n; i++) ids[i] = rng.nextInt(VOCAB);
                for (int i = 0; i < n; i++) targets[i] = (i + 1) % c.seqLen == 0 ? Trainer.DEFAULT_IGNORE_INDEX : ids[i + 1];
                step = () -> t.stepTokens(ids, targets).loss();
            } else {
                float[] x = new float[n * c.inputDim], y = new float[n * c.dModel];
                for (int i = 0; i < x.length; i++) x[i] = (float) rng.nextGaussian();
                for (int i = 0; i < y.length; i++) y[i] = (float) rng.nextGaussian();
                step = () -> t.stepMse(x, y).loss();
            }
            double med = Timing.medianMs(warmup, steps, step);
            long params = model.parameterCount();
            double mfu = 6.0 * params * n / (med / 1e3) / (PEAK_TFLOPS * 1e12);
            System.out.printf(Locale.ROOT, "| %s | %s%s | %d × %d | %.1fM | %.2f | %.0f | %.1f%% |%n", c.name, dtype,
                    graphs && !device.isCpu() ? (t.stepGraphsOffReason().isEmpty() ? " graph" : " (graph off: " + t.stepGraphsOffReason() + ")")
                           : "", c.batch, c.seqLen, params / 1e6, med, n / (med / 1e3), 100 * mfu);
        }
    }
}
