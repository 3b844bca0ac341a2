package org.mamba4j.consumer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.MambaState;
import org.mamba4j.lm.MambaLM;
import org.mamba4j.lm.Sampling;
import org.mamba4j.lm.TokenListener;

class InstalledArtifactTest {
    @Test
    void nativesLoadFromTheJarAndAModelRuns() throws Exception {
        Path cache = Path.of(System.getProperty("org.bytedeco.javacpp.cachedir"));
        try (MambaModel m = MambaModel.builder(Mamba1Config.defaults()).inputDim(8).seed(1).build();
             MambaState s = m.newState(2)) {
            float[] y = m.step(s, new float[] {1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8});
            assertEquals(2 * 128, y.length);
            assertTrue(Float.isFinite(y[0]) && y[0] != 0);
            assertEquals(y[5], y[128 + 5], 0f);  // identical rows, identical outputs
        }
        // libmamba and OpenBLAS were extracted from the platform jars into the (initially empty) cache.
        try (Stream<Path> files = Files.walk(cache)) {
            assertTrue(files.anyMatch(p -> p.getFileName().toString().equals("libmamba.so")), "libmamba.so extracted into " + cache);
        }
        String where = MambaModel.class.getProtectionDomain().getCodeSource().getLocation().toString();
        assertTrue(where.endsWith(".jar") && !where.contains("/mamba-api/target/"), "mamba-api came from the installed jar: " + where);
    }

    /** mamba4j-platform brings the language models too (mamba-lm): a tiny vocabulary model generates greedily. */
    @Test
    void aLanguageModelGenerates() {
        try (MambaLM lm = new MambaLM(MambaModel.builder(Mamba1Config.builder().dModel(16).layers(1).build())
                .vocabSize(8).seed(1).build(), 8, null)) {
            int[] out = lm.generate(new int[] {1, 2, 3}, Sampling.greedy().maxNewTokens(4), TokenListener.NONE);
            assertEquals(4, out.length);
            for (int t : out) assertTrue(t >= 0 && t < 8, "token " + t);
        }
        String where = MambaLM.class.getProtectionDomain().getCodeSource().getLocation().toString();
        assertTrue(where.endsWith(".jar") && !where.contains("/mamba-lm/target/"), "mamba-lm came from the installed jar: " + where);
    }
}
