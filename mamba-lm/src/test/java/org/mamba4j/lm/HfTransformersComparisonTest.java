package org.mamba4j.lm;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.io.SafeTensorsFile;

/**
 * mamba4j against HuggingFace transformers' MambaForCausalLM on the same random checkpoints, made on the
 * device by scripts/hf_reference.py (folder given by -Dmamba4j.hfModels=DIR or MAMBA4J_HF_MODELS; skipped
 * without it). The reference logits are transformers' in float64 on the saved f32 weights. Checks:
 * F32 logits rel L2 < 1e-4 at every position, identical greedy tokens, BF16 (GPU) mean KL < 1e-3.
 * Every (model, device, dtype) is measured and printed before the assertions.
 */
@Tag("gpu")
class HfTransformersComparisonTest {
    private static Path models() {
        String dir = System.getProperty("mamba4j.hfModels", System.getenv("MAMBA4J_HF_MODELS"));
        Assumptions.assumeTrue(dir != null && Files.isDirectory(Path.of(dir)), "no -Dmamba4j.hfModels folder");
        return Path.of(dir);
    }

    private static List<Device> devices() {
        List<Device> d = new ArrayList<>();
        d.add(Device.cpu());
        if (Device.cudaCount() > 0) d.add(Device.cuda(0));
        return d;
    }

    private static int[] ints(float[] f) {
        int[] r = new int[f.length];
        for (int i = 0; i < f.length; i++) r[i] = (int) f[i];
        return r;
    }

    @Test
    void logitsAndGreedyTokensMatchTransformers() throws Exception {
        Path root = models();
        List<String> report = new ArrayList<>(), failures = new ArrayList<>();
        try (var shapes = Files.list(root)) {
            for (Path folder : shapes.filter(Files::isDirectory).sorted().toList()) {
                float[] ids, gen, ref;
                int V;
                try (SafeTensorsFile r = SafeTensorsFile.open(folder.resolve("reference.safetensors"))) {
                    ids = r.readFloats("input_ids");
                    gen = r.readFloats("generated");
                    ref = r.readFloats("logits");
                    V = (int) r.get("logits").shape()[1];
                }
                {
                    int[] prompt = ints(ids), greedy = ints(gen);
                    int[] all = Arrays.copyOf(prompt, prompt.length + greedy.length - 1);
                    System.arraycopy(greedy, 0, all, prompt.length, greedy.length - 1);
                    for (Device device : devices()) {
                        for (DType dtype : device.isCpu() ? new DType[] {DType.F32} : new DType[] {DType.F32, DType.BF16}) {
                            try (MambaLM lm = MambaLM.fromPretrained(folder, device, dtype)) {
                                int P = lm.model().vocabSize();
                                float[] got = lm.logits(all);
                                double worstRel = 0, meanKl = 0;
                                for (int p = 0; p < all.length; p++) {
                                    float[] a = Arrays.copyOfRange(got, p * P, p * P + V), b = Arrays.copyOfRange(ref, p * V, (p + 1) * V);
                                    worstRel = Math.max(worstRel, relL2(a, b));
                                    meanKl += kl(b, a) / all.length;
                                }
                                int[] tokens = lm.generate(prompt, Sampling.greedy().maxNewTokens(greedy.length), TokenListener.NONE);
                                report.add(String.format("%s %s %s: worst rel L2 %.2e, mean KL %.2e, greedy %s", folder.getFileName(),
                                        device, dtype, worstRel, meanKl, Arrays.equals(tokens, greedy) ? "identical" : "DIFFERENT"));
                                System.out.println(report.get(report.size() - 1));
                                boolean ok = dtype == DType.F32 ? worstRel < 1e-4 && Arrays.equals(greedy, tokens) : meanKl < 1e-3;
                                if (!ok) failures.add(report.get(report.size() - 1));
                            }
                        }
                    }
                }
            }
        }
        assertTrue(!report.isEmpty(), "no model folders under " + root);
        assertTrue(failures.isEmpty(), "outside tolerance: " + failures);
    }

    private static double relL2(float[] a, float[] b) {
        double n = 0, d = 0;
        for (int i = 0; i < a.length; i++) {
            n += (double) (a[i] - b[i]) * (a[i] - b[i]);
            d += (double) b[i] * b[i];
        }
        return Math.sqrt(n / d);
    }

    /** KL(softmax(p) ‖ softmax(q)) in double. */
    private static double kl(float[] p, float[] q) {
        double mp = Double.NEGATIVE_INFINITY, mq = Double.NEGATIVE_INFINITY;
        for (int i = 0; i < p.length; i++) {
            mp = Math.max(mp, p[i]);
            mq = Math.max(mq, q[i]);
        }
        double zp = 0, zq = 0;
        for (int i = 0; i < p.length; i++) {
            zp += Math.exp(p[i] - mp);
            zq += Math.exp(q[i] - mq);
        }
        double kl = 0;
        for (int i = 0; i < p.length; i++) {
            double lp = p[i] - mp - Math.log(zp), lq = q[i] - mq - Math.log(zq);
            kl += Math.exp(lp) * (lp - lq);
        }
        return kl;
    }
}
