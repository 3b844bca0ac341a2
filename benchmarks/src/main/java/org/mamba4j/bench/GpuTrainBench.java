package org.mamba4j.bench;

import java.util.Arrays;
import java.util.Random;
import org.mamba4j.AdamW;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.Trainer;

/**
 * Training step time (forward + backward + clip + AdamW through {@code Trainer.stepMse}, host copies of
 * inputs/targets included) on a CUDA device, or the CPU with argument {@code cpu}. Prints a markdown table.
 * <pre>java ... org.mamba4j.bench.GpuTrainBench [cuda|cpu]</pre>
 */
public final class GpuTrainBench {
    private record Case(String name, int dModel, int layers, int inputDim, int batch, int seqLen) {}

    private static final Case[] CASES = {
        new Case("default 128×3", 128, 3, 32, 16, 64),
        new Case("256×4", 256, 4, 32, 16, 64),
        new Case("mamba-rs default, T=32", 128, 3, 32, 1, 32),
        new Case("130m-shaped 768×24", 768, 24, 768, 8, 256),
    };

    public static void main(String[] args) {
        Device device = args.length > 0 && args[0].equals("cpu") ? Device.cpu() : Device.cuda(0);
        System.out.println("| model | dtype | B × T | ms / step (median of 20) | tokens/s |");
        System.out.println("|---|---|---|---:|---:|");
        Random rng = new Random(3);
        for (Case c : CASES) {
            for (DType dtype : device.isCpu() ? new DType[] {DType.F32} : new DType[] {DType.F32, DType.BF16}) {
                Mamba1Config cfg = Mamba1Config.builder().dModel(c.dModel).layers(c.layers).build();
                try (MambaModel model = MambaModel.builder(cfg).inputDim(c.inputDim).device(device).dtype(dtype).seed(1).build();
                     Trainer t = Trainer.builder(model).batch(c.batch).seqLen(c.seqLen)
                             .adamW(AdamW.ofLearningRate(1e-4)).clipGradNorm(1.0).build()) {
                    float[] x = new float[c.batch * c.seqLen * c.inputDim], y = new float[c.batch * c.seqLen * c.dModel];
                    for (int i = 0; i < x.length; i++) x[i] = (float) rng.nextGaussian();
                    for (int i = 0; i < y.length; i++) y[i] = (float) rng.nextGaussian();
                    for (int i = 0; i < 3; i++) t.stepMse(x, y);
                    double[] ms = new double[20];
                    for (int i = 0; i < ms.length; i++) {
                        long t0 = System.nanoTime();
                        t.stepMse(x, y);
                        ms[i] = (System.nanoTime() - t0) / 1e6;
                    }
                    Arrays.sort(ms);
                    double med = ms[ms.length / 2];
                    System.out.printf("| %s | %s | %d × %d | %.2f | %.0f |%n", c.name, dtype, c.batch, c.seqLen, med,
                            c.batch * c.seqLen / (med / 1e3));
                }
            }
        }
    }
}
