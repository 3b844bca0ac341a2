package org.mamba4j;

import com.code_intelligence.jazzer.junit.DictionaryEntries;
import com.code_intelligence.jazzer.junit.FuzzTest;
import java.nio.file.Files;
import org.junit.jupiter.api.AfterAll;
import org.mamba4j.fuzz.FuzzChecks;

/**
 * Coverage-guided fuzzing of the native loader behind {@link MambaModel#load}: the bytes are written to a file and
 * loaded through the public API, so every configuration a file can smuggle past the Java checks reaches libmamba
 * (model construction, weight writes, one decode step). A model that loads must also be small: at most twice the
 * file's size in f32 weights, since every weight comes from the file. Seeds: {@code CheckpointFuzzTestInputs}.
 */
class CheckpointFuzzTest {
    @FuzzTest(maxDuration = "5s")  // the build's bounded run; scripts/fuzz.sh runs longer
    @DictionaryEntries({"\"format\"", "\"mamba4j\"", "\"format_version\"", "\"arch\"", "\"mamba1\"", "\"config\"", "\"input_dim\"",
            "\"vocab_size\"", "\"tie_embeddings\"", "\"checksum\"", "\"d_model\"", "\"d_state\"", "\"d_conv\"", "\"expand\"",
            "\"dt_rank\"", "\"n_layers\"", "\"norm_eps\"", "\"dt_min\"", "\"dt_max\"", "\"dt_init_floor\"", "65536", "1024",
            "\"backbone.norm_f.weight\"", "\"input_proj.weight\"", "\"F32\"", "\"BF16\""})
    void loadAndStep(byte[] data) {
        FuzzChecks.file("model.safetensors", data, path -> {
            try (MambaModel m = MambaModel.load(path); MambaState s = m.newState(1)) {
                if (m.parameterCount() * 4 > 2 * Files.size(path))
                    throw new AssertionError("a " + Files.size(path) + "-byte file built a model of " + m.parameterCount() + " weights");
                if (m.vocabSize() > 0) m.stepTokens(s, new int[] {0}, new float[m.vocabSize()]);
                else m.step(s, new float[m.inputWidth()]);
            }
        });
    }

    @AfterAll
    static void report() {
        FuzzChecks.report("checkpoint");
    }
}
