package org.mamba4j.lm;

import com.code_intelligence.jazzer.junit.DictionaryEntries;
import com.code_intelligence.jazzer.junit.FuzzTest;
import org.junit.jupiter.api.AfterAll;
import org.mamba4j.fuzz.FuzzChecks;

/**
 * Coverage-guided fuzzing of {@code config.json} reading, both key styles (transformers' {@code hidden_size}…
 * and state-spaces' {@code d_model}… with {@code ssm_cfg}). Seeds: {@code HfConfigFuzzTestInputs}.
 */
class HfConfigFuzzTest {
    @FuzzTest(maxDuration = "5s")  // the build's bounded run; scripts/fuzz.sh runs longer
    @DictionaryEntries({"\"model_type\"", "\"mamba\"", "\"hidden_size\"", "\"num_hidden_layers\"", "\"n_layer\"", "\"vocab_size\"",
            "\"state_size\"", "\"conv_kernel\"", "\"expand\"", "\"intermediate_size\"", "\"time_step_rank\"", "\"auto\"",
            "\"layer_norm_epsilon\"", "\"rms_norm_eps\"", "\"use_bias\"", "\"use_conv_bias\"", "\"pad_vocab_size_multiple\"",
            "\"tie_word_embeddings\"", "\"hidden_act\"", "\"d_model\"", "\"ssm_cfg\"", "\"d_state\"", "\"d_conv\"", "\"dt_rank\"",
            "\"rms_norm\"", "\"norm_epsilon\"", "\"tie_embeddings\"", "\"attn_layer_idx\"", "\"layer\"", "\"Mamba1\"",
            "\"residual_in_fp32\"", "true", "false", "null", "1e-5", "2147483648", "65536"})
    void readConfigJson(byte[] data) {
        FuzzChecks.file("config.json", data, HfMambaConfig::read);
    }

    @AfterAll
    static void report() {
        FuzzChecks.report("hf-config");
    }
}
