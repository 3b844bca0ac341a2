package org.mamba4j.lm;

import com.code_intelligence.jazzer.junit.DictionaryEntries;
import com.code_intelligence.jazzer.junit.FuzzTest;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.mamba4j.fuzz.FuzzChecks;

/**
 * Coverage-guided fuzzing of loading a tokenizer folder: the input is a {@code tokenizer.json} and, after a line
 * {@code =====}, an optional {@code tokenizer_config.json}. Our Java side (JSON checks, vocabulary size, EOS
 * look-up) and DJL's native tokenizers library behind it must reject bad files with {@code CheckpointException}.
 * Loading only: encoding and decoding are not fuzzed. Seeds: {@code TokenizerFuzzTestInputs}.
 */
class TokenizerFuzzTest {
    private static Path folder;

    @BeforeAll
    static void setUp() {
        TokenizerTest.keepDjlCacheInTheBuildFolder();
        folder = FuzzChecks.scratch("tokenizer-folder");
    }

    @FuzzTest(maxDuration = "5s")  // the build's bounded run; scripts/fuzz.sh runs longer
    @DictionaryEntries({"\"model\"", "\"type\"", "\"BPE\"", "\"WordPiece\"", "\"Unigram\"", "\"WordLevel\"", "\"vocab\"",
            "\"merges\"", "\"added_tokens\"", "\"id\"", "\"content\"", "\"special\"", "\"eos_token\"", "\"normalizer\"",
            "\"pre_tokenizer\"", "\"decoder\"", "\"ByteLevel\"", "\"post_processor\"", "\"truncation\"", "\"padding\"",
            "\"<|endoftext|>\"", "null"})
    void loadTokenizerFolder(byte[] data) {
        FuzzChecks.folder(folder, FuzzChecks.split(data, "tokenizer.json", "tokenizer_config.json"), List.of(), dir -> {
            try (Tokenizer t = Tokenizer.fromFile(dir)) {
                t.vocabSize();
            }
        });
    }

    @AfterAll
    static void report() {
        FuzzChecks.report("tokenizer-folder");
    }
}
