package org.mamba4j;

import com.code_intelligence.jazzer.junit.DictionaryEntries;
import com.code_intelligence.jazzer.junit.FuzzTest;
import org.junit.jupiter.api.AfterAll;
import org.mamba4j.fuzz.FuzzChecks;

/** Coverage-guided fuzzing of {@link LinearHead#load} (a trainer's saved head). Seeds: {@code LinearHeadFuzzTestInputs}. */
class LinearHeadFuzzTest {
    @FuzzTest(maxDuration = "5s")  // the build's bounded run; scripts/fuzz.sh runs longer
    @DictionaryEntries({"\"format\"", "\"mamba4j-head\"", "\"format_version\"", "\"checksum\"", "\"lm_head.weight\"",
            "\"lm_head.bias\"", "\"F32\"", "\"F16\"", "\"data_offsets\"", "\"shape\""})
    void load(byte[] data) {
        FuzzChecks.file("head.safetensors", data, path -> LinearHead.load(path).argmax(new float[0]));
    }

    @AfterAll
    static void report() {
        FuzzChecks.report("linear-head");
    }
}
