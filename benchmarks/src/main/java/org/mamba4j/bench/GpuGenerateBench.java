package org.mamba4j.bench;

import java.util.Random;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.MambaState;
import org.mamba4j.lm.MambaLM;
import org.mamba4j.lm.Sampling;
import org.mamba4j.lm.TokenListener;

/**
 * End-to-end language-model generation through {@link MambaLM} (prompt prefill in one pass, then decode), on random
 * models in the shapes of state-spaces/mamba-{130m,370m,1.4b,2.8b}-hf, B = 1, CUDA graphs on. Prints a markdown
 * table: the raw decode rate of {@code stepTokens} (logits to the host, no sampling) next to {@code generate}'s
 * tokens/s for prompt 128 + 256 new tokens — greedy and sampled (temperature 0.8, top-k 50, top-p 0.95) with device
 * sampling (only ids cross), and greedy with host sampling — with generate as a percentage of raw stepTokens
 * (issue 11 aims at ≥ 95%), and time to first token for prompts of 128/1024/4096. (Random weights: every prompt runs
 * to maxNewTokens, no stop token.)
 * <pre>java ... org.mamba4j.bench.GpuGenerateBench [cuda|cpu]</pre>
 */
public final class GpuGenerateBench {
    private record Shape(String name, int dModel, int layers) {}

    private static final Shape[] SHAPES = {
        new Shape("130m", 768, 24), new Shape("370m", 1024, 48), new Shape("1.4b", 2048, 48), new Shape("2.8b", 2560, 64)
    };

    public static void main(String[] args) {
        Device device = args.length > 0 && args[0].equals("cpu") ? Device.cpu() : Device.cuda(0);
        System.out.println("| shape | dtype | stepTokens tok/s | generate greedy (device) tok/s | % of step | generate sampled (device) tok/s"
                + " | % of step | generate greedy (host sampling) tok/s | TTFT 128 (ms) | TTFT 1024 (ms) | TTFT 4096 (ms) |");
        System.out.println("|---|---|---|---|---|---|---|---|---|---|---|");
        Random rng = new Random(7);
        for (Shape s : SHAPES) {
            for (DType dtype : device.isCpu() ? new DType[] {DType.F32} : new DType[] {DType.BF16, DType.F32}) {
                Mamba1Config c = Mamba1Config.builder().dModel(s.dModel).layers(s.layers).build();
                try (MambaModel model = MambaModel.builder(c).vocabSize(50280).device(device).dtype(dtype).seed(1).build();
                     MambaLM lm = new MambaLM(model, 50277, null)) {
                    model.setCudaGraphs(true);
                    int[] prompt = tokens(rng, 128);
                    Sampling greedy = Sampling.greedy().maxNewTokens(256);
                    Sampling sampled = Sampling.ofTemperature(0.8).topK(50).topP(0.95).seed(3).maxNewTokens(256);
                    double step = stepRate(model, 256);
                    double dev = generateRate(lm, prompt, greedy, true);
                    double devSampled = generateRate(lm, prompt, sampled, true);
                    double host = generateRate(lm, prompt, greedy, false);
                    StringBuilder row = new StringBuilder(String.format("| %s | %s | %.1f | %.1f | %.1f%% | %.1f | %.1f%% | %.1f |",
                            s.name, dtype, step, dev, 100 * dev / step, devSampled, 100 * devSampled / step, host));
                    for (int len : new int[] {128, 1024, 4096}) row.append(String.format(" %.1f |", ttft(model, tokens(rng, len)) * 1e3));
                    System.out.println(row);
                }
            }
        }
    }

    /** Decode tokens/s of stepTokens alone (B = 1, logits to the host), after a warm-up that captures the graph. */
    private static double stepRate(MambaModel model, int steps) {
        float[] logits = new float[model.vocabSize()];
        int[] id = {1};
        try (MambaState st = model.newState(1)) {
            for (int i = 0; i < 16; i++) model.stepTokens(st, id, logits);
            long t0 = System.nanoTime();
            for (int i = 0; i < steps; i++) {
                id[0] = (i * 7919) % 50277;
                model.stepTokens(st, id, logits);
            }
            return steps / ((System.nanoTime() - t0) / 1e9);
        }
    }

    /** generate's tokens/s (prefill included, as a user sees it), after a short warm-up call with the same path. */
    private static double generateRate(MambaLM lm, int[] prompt, Sampling sampling, boolean device) {
        lm.setDeviceSampling(device);
        lm.generate(prompt, sampling.maxNewTokens(16), TokenListener.NONE);  // warm-up + graph capture
        long t0 = System.nanoTime();
        int[] out = lm.generate(prompt, sampling, TokenListener.NONE);
        double secs = (System.nanoTime() - t0) / 1e9;
        lm.setDeviceSampling(true);
        return out.length / secs;
    }

    /** Median over 5 runs of prefill(prompt) → logits of the last position on the host. */
    private static double ttft(MambaModel model, int[] prompt) {
        double[] t = new double[5];
        float[] logits = new float[model.vocabSize()];
        try (MambaState st = model.newState(1)) {
            model.prefillTokens(st, prompt, prompt.length, logits);  // warm-up (workspace growth)
            for (int i = 0; i < t.length; i++) {
                st.reset();
                long t0 = System.nanoTime();
                model.prefillTokens(st, prompt, prompt.length, logits);
                t[i] = (System.nanoTime() - t0) / 1e9;
            }
        }
        java.util.Arrays.sort(t);
        return t[t.length / 2];
    }

    private static int[] tokens(Random rng, int n) {
        int[] p = new int[n];
        for (int i = 0; i < n; i++) p[i] = rng.nextInt(50277);
        return p;
    }
}
