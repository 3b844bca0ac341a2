package org.mamba4j.lm;

import java.nio.file.Path;
import java.util.Random;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.GemmMode;
import org.mamba4j.Mamba1Config;
import org.mamba4j.Mamba3Config;
import org.mamba4j.MambaModel;
import org.mamba4j.ModelConfig;

/** Tiny random-weight language models for engine tests: steps take microseconds on the CPU. */
final class TinyLanguageModels {
    /** The padded vocabulary; the tokenizer of {@link TokenizerTest#GPT_NEOX_LIKE} has 22 ids. */
    static final int PADDED = 24, VOCAB = 22;

    private TinyLanguageModels() {}

    static ModelConfig mamba1() {
        return Mamba1Config.builder().dModel(32).dState(8).layers(2).build();
    }

    static ModelConfig mamba3() {
        return Mamba3Config.builder().dModel(32).headdim(16).dState(16).layers(2).build();
    }

    /** A model with seeded weights plus noise (so the logits are not flat), wrapped with the test tokenizer. */
    static MambaLM lm(ModelConfig config, Device device, GemmMode mode, boolean tokenizer) {
        djlCache();
        MambaModel m = MambaModel.builder(config).vocabSize(PADDED).device(device).dtype(DType.F32).gemmMode(mode).seed(3).build();
        try {
            Random r = new Random(1);
            for (String n : m.parameterNames()) {
                float[] v = m.getParameter(n);
                double scale = n.contains("embedding") ? 1.0 : 0.05;
                for (int i = 0; i < v.length; i++) v[i] += (float) (scale * r.nextGaussian());
                m.setParameter(n, v);
            }
            return new MambaLM(m, VOCAB, tokenizer ? Tokenizer.fromJson(TokenizerTest.GPT_NEOX_LIKE, "test") : null);
        } catch (RuntimeException e) {
            m.close();
            throw e;
        }
    }

    /** Random prompt ids in [0, VOCAB). */
    static int[] prompt(Random rng, int length) {
        int[] p = new int[length];
        for (int i = 0; i < length; i++) p[i] = rng.nextInt(VOCAB);
        return p;
    }

    static void djlCache() {
        if (System.getProperty("ENGINE_CACHE_DIR") == null && System.getenv("ENGINE_CACHE_DIR") == null)
            System.setProperty("ENGINE_CACHE_DIR", Path.of("target", "djl-cache").toAbsolutePath().toString());
    }
}
