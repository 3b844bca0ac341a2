package org.mamba4j.io;

import com.code_intelligence.jazzer.junit.DictionaryEntries;
import com.code_intelligence.jazzer.junit.FuzzTest;
import org.junit.jupiter.api.AfterAll;
import org.mamba4j.fuzz.FuzzChecks;

/**
 * Coverage-guided fuzzing of the safetensors reader: header length, JSON, dtypes, shapes, offsets, metadata,
 * and the data of every tensor it admits. Seeds: {@code SafeTensorsFuzzTestInputs} (valid files of every dtype,
 * a mamba4j checkpoint, hostile size claims, every crash ever found). Checks: {@link FuzzChecks}.
 */
class SafeTensorsFuzzTest {
    @FuzzTest(maxDuration = "5s")  // the build's bounded run; scripts/fuzz.sh runs longer
    @DictionaryEntries({"\"dtype\"", "\"shape\"", "\"data_offsets\"", "\"__metadata__\"", "\"F32\"", "\"F16\"", "\"BF16\"",
            "\"F64\"", "\"I32\"", "\"U8\"", "\"BOOL\"", "18446744073709551615", "9223372036854775807", "-1", "1e3", "[]"})
    void openAndReadEveryTensor(byte[] data) {
        FuzzChecks.file("input.safetensors", data, path -> {
            try (SafeTensorsFile f = SafeTensorsFile.open(path)) {
                f.metadata().forEach((k, v) -> k.length());
                for (TensorInfo t : f.tensors()) {
                    f.get(t.name());
                    switch (t.dtype()) {
                        case F32, F16, BF16, F64 -> f.readFloats(t.name());
                        default -> { }
                    }
                }
            }
        });
    }

    @AfterAll
    static void report() {
        FuzzChecks.report("safetensors");
    }
}
