package org.mamba4j;

import com.code_intelligence.jazzer.junit.DictionaryEntries;
import com.code_intelligence.jazzer.junit.FuzzTest;
import org.junit.jupiter.api.AfterAll;
import org.mamba4j.fuzz.FuzzChecks;

/** Coverage-guided fuzzing of {@link OptimizerState#load}. Seeds: {@code OptimizerStateFuzzTestInputs}. */
class OptimizerStateFuzzTest {
    @FuzzTest(maxDuration = "5s")  // the build's bounded run; scripts/fuzz.sh runs longer
    @DictionaryEntries({"\"format\"", "\"mamba4j-adamw\"", "\"format_version\"", "\"step\"", "\"checksum\"", "\"exp_avg.\"",
            "\"exp_avg_sq.\"", "\"F32\"", "\"BF16\"", "\"data_offsets\"", "\"shape\""})
    void load(byte[] data) {
        FuzzChecks.file("adamw.safetensors", data, path -> {
            OptimizerState s = OptimizerState.load(path);
            for (String n : s.names()) s.secondMoment(n);
        });
    }

    @AfterAll
    static void report() {
        FuzzChecks.report("optimizer-state");
    }
}
