package org.mamba4j.lm;

import com.code_intelligence.jazzer.junit.DictionaryEntries;
import com.code_intelligence.jazzer.junit.FuzzTest;
import org.junit.jupiter.api.AfterAll;
import org.mamba4j.fuzz.FuzzChecks;

/**
 * Coverage-guided fuzzing of the official Mamba-3 {@code config.json} reader ({@link Mamba3LMConfig}): only
 * {@link org.mamba4j.CheckpointException}, bounded time and memory. Seeds: {@code Mamba3LMConfigFuzzTestInputs}.
 */
class Mamba3LMConfigFuzzTest {
    @FuzzTest(maxDuration = "5s")  // the build's bounded run; scripts/fuzz.sh runs longer
    @DictionaryEntries({"\"d_model\"", "\"n_layer\"", "\"vocab_size\"", "\"d_intermediate\"", "\"ssm_cfg\"", "\"layer\"", "\"Mamba3\"",
            "\"d_state\"", "\"expand\"", "\"headdim\"", "\"ngroups\"", "\"rope_fraction\"", "\"A_floor\"", "\"dt_min\"", "\"dt_max\"",
            "\"dt_init_floor\"", "\"chunk_size\"", "\"is_outproj_norm\"", "\"is_mimo\"", "\"mimo_rank\"", "\"dropout\"",
            "\"attn_layer_idx\"", "\"attn_cfg\"", "\"rms_norm\"", "\"residual_in_fp32\"", "\"fused_add_norm\"",
            "\"pad_vocab_size_multiple\"", "\"tie_embeddings\"", "\"norm_epsilon\"", "true", "false", "null", "0.5", "1.0", "1e-4",
            "2147483648", "65536"})
    void readConfigJson(byte[] data) {
        FuzzChecks.file("config.json", data, Mamba3LMConfig::read);
    }

    @AfterAll
    static void report() {
        FuzzChecks.report("mamba3-config");
    }
}
