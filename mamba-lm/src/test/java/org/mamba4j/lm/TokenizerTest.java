package org.mamba4j.lm;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.mamba4j.CheckpointException;

/**
 * Runs the real DJL tokenizer on a tiny byte-level BPE tokenizer.json written by the test (the same
 * kind of model, pre-tokenizer and decoder as the GPT-NeoX tokenizer that Mamba uses).
 */
class TokenizerTest {

    /** Byte-level alphabet: Ġ (U+0120) is a space, Ã (U+00C3) and © (U+00A9) are the bytes of "é". */
    private static final String VOCAB = """
            {"<|endoftext|>": 0, "<|padding|>": 1, "h": 2, "e": 3, "l": 4, "o": 5, "\\u0120": 6, "w": 7, "r": 8,
             "d": 9, "he": 10, "ll": 11, "hell": 12, "hello": 13, "\\u0120w": 14, "\\u0120wo": 15, "\\u0120wor": 16,
             "\\u0120worl": 17, "\\u0120world": 18, "!": 19, "\\u00c3": 20, "\\u00a9": 21}""";

    private static final String MERGES = """
            ["h e", "l l", "he ll", "hell o", "\\u0120 w", "\\u0120w o", "\\u0120wo r", "\\u0120wor l", "\\u0120worl d"]""";

    private static final String BYTE_LEVEL =
            "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}";

    static String tokenizerJson(String addedTokens) {
        return "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,\n"
                + " \"added_tokens\": " + addedTokens + ",\n"
                + " \"normalizer\": null, \"pre_tokenizer\": " + BYTE_LEVEL + ", \"post_processor\": null,\n"
                + " \"decoder\": " + BYTE_LEVEL + ",\n"
                + " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null,"
                + " \"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, \"fuse_unk\": false,"
                + " \"byte_fallback\": false, \"vocab\": " + VOCAB + ", \"merges\": " + MERGES + "}}";
    }

    private static String added(int id, String content) {
        return "{\"id\": " + id + ", \"content\": \"" + content + "\", \"single_word\": false, \"lstrip\": false,"
                + " \"rstrip\": false, \"normalized\": false, \"special\": true}";
    }

    static final String GPT_NEOX_LIKE =
            tokenizerJson("[" + added(0, "<|endoftext|>") + ", " + added(1, "<|padding|>") + "]");

    @TempDir
    Path dir;

    @BeforeAll
    static void keepDjlCacheInTheBuildFolder() {
        // DJL copies its bundled native library into a cache folder; never let a test use ~/.djl.ai.
        if (System.getenv("ENGINE_CACHE_DIR") == null && System.getProperty("ENGINE_CACHE_DIR") == null) {
            Path target = Path.of("target");
            Path cache = Files.isDirectory(target)
                    ? target.resolve("djl-cache")
                    : Path.of(System.getProperty("java.io.tmpdir"), "mamba4j-test-djl-cache");
            System.setProperty("ENGINE_CACHE_DIR", cache.toAbsolutePath().toString());
        }
    }

    private Tokenizer load(String json) throws IOException {
        Path file = dir.resolve("tokenizer.json");
        Files.writeString(file, json);
        return Tokenizer.fromFile(file);
    }

    @Test
    void encodesAndDecodes() throws IOException {
        try (Tokenizer t = load(GPT_NEOX_LIKE)) {
            assertArrayEquals(new int[] {13, 18, 19}, t.encode("hello world!"));
            assertArrayEquals(new int[] {20, 21}, t.encode("é"));
            assertArrayEquals(new int[0], t.encode(""));
            for (String text : new String[] {"hello world!", "hello", " world hello!", "é!é", "hello\u00e9 world", ""}) {
                assertEquals(text, t.decode(t.encode(text)), text);
            }
        }
    }

    @Test
    void addsNoSpecialTokensAndTruncatesNothing() throws IOException {
        try (Tokenizer t = load(GPT_NEOX_LIKE)) {
            int[] ids = t.encode("hello");
            assertArrayEquals(new int[] {13}, ids);
            String longText = "hello" + " world".repeat(5999); // 6000 tokens, far past 512
            int[] many = t.encode(longText);
            assertEquals(6000, many.length);
            assertEquals(longText, t.decode(many));
        }
    }

    @Test
    void specialTokens() throws IOException {
        try (Tokenizer t = load(GPT_NEOX_LIKE)) {
            assertArrayEquals(new int[] {13, 0}, t.encode("hello<|endoftext|>"));
            assertEquals("hello<|endoftext|>", t.decode(new int[] {13, 0}));
            assertEquals("hello", t.decode(new int[] {13, 0}, true));
            assertEquals(Integer.valueOf(0), t.eosTokenId());
            assertEquals(22, t.vocabSize());
        }
    }

    @Test
    void unknownIdsAreSkippedAndNegativeIdsRejected() throws IOException {
        try (Tokenizer t = load(GPT_NEOX_LIKE)) {
            assertEquals("hello world", t.decode(new int[] {13, 50_279, 18})); // a padded-vocab id
            assertThrows(IllegalArgumentException.class, () -> t.decode(new int[] {13, -1}));
        }
    }

    @Test
    void streamDecodingMatchesDecode() throws IOException {
        try (Tokenizer t = load(GPT_NEOX_LIKE)) {
            String text = "hello world! é hello é!";
            int[] ids = t.encode(text);
            Tokenizer.StreamDecoder stream = t.streamDecoder();
            StringBuilder out = new StringBuilder();
            for (int id : ids) {
                String piece = stream.push(id);
                assertTrue(piece.indexOf('\uFFFD') < 0, "emitted half a character: " + piece);
                out.append(piece);
            }
            out.append(stream.flush());
            assertEquals(t.decode(ids), out.toString());
            assertEquals(text, out.toString());
            assertEquals(text, stream.text());
            assertArrayEquals(ids, stream.ids());
            assertEquals(ids.length, stream.size());
        }
    }

    @Test
    void streamDecodingHoldsBackIncompleteUtf8() throws IOException {
        try (Tokenizer t = load(GPT_NEOX_LIKE)) {
            Tokenizer.StreamDecoder stream = t.streamDecoder();
            assertEquals("hello", stream.push(13));
            assertEquals("", stream.push(20)); // first byte of "é"
            assertEquals("é", stream.push(21)); // second byte completes it
            assertEquals(" world", stream.push(18));
            assertEquals("", stream.flush());

            Tokenizer.StreamDecoder dangling = t.streamDecoder();
            assertEquals("hello", dangling.push(13));
            assertEquals("", dangling.push(20));
            assertEquals("\uFFFD", dangling.flush()); // an unfinished character at the very end
            assertEquals("", dangling.flush());
        }
    }

    @Test
    void streamDecoderCanSkipSpecialTokens() throws IOException {
        try (Tokenizer t = load(GPT_NEOX_LIKE)) {
            Tokenizer.StreamDecoder keep = t.streamDecoder();
            Tokenizer.StreamDecoder skip = t.streamDecoder(true);
            StringBuilder a = new StringBuilder();
            StringBuilder b = new StringBuilder();
            for (int id : new int[] {13, 1, 18, 0}) {
                a.append(keep.push(id));
                b.append(skip.push(id));
            }
            assertEquals("hello<|padding|> world<|endoftext|>", a.toString());
            assertEquals("hello world", b.toString());
        }
    }

    @Test
    void eosTokenId() throws IOException {
        try (Tokenizer t = load(tokenizerJson("[" + added(1, "<|padding|>") + "]"))) {
            assertNull(t.eosTokenId());
        }
        try (Tokenizer t = load(tokenizerJson("[" + added(0, "<s>") + ", " + added(1, "</s>") + "]"))) {
            assertEquals(Integer.valueOf(1), t.eosTokenId());
        }
        // a sibling special_tokens_map.json wins over the name heuristics
        Files.writeString(dir.resolve("special_tokens_map.json"),
                "{\"eos_token\": {\"content\": \"<|padding|>\", \"special\": true}}");
        try (Tokenizer t = load(GPT_NEOX_LIKE)) {
            assertEquals(Integer.valueOf(1), t.eosTokenId());
        }
        Files.writeString(dir.resolve("tokenizer_config.json"), "{\"eos_token\": \"!\"}");
        try (Tokenizer t = Tokenizer.fromFile(dir)) { // a folder works too; model vocab entries resolve
            assertEquals(Integer.valueOf(19), t.eosTokenId());
        }
    }

    @Test
    void missingFile() {
        Path missing = dir.resolve("missing").resolve("tokenizer.json");
        CheckpointException e = assertThrows(CheckpointException.class, () -> Tokenizer.fromFile(missing));
        assertTrue(e.getMessage().contains(missing.toString()), e.getMessage());
        CheckpointException folder = assertThrows(CheckpointException.class, () -> Tokenizer.fromFile(dir));
        assertTrue(folder.getMessage().contains("tokenizer.json"), folder.getMessage());
    }

    @Test
    void corruptJson() throws IOException {
        String truncated = GPT_NEOX_LIKE.substring(0, GPT_NEOX_LIKE.length() / 2);
        CheckpointException e = assertThrows(CheckpointException.class, () -> load(truncated));
        assertTrue(e.getMessage().contains("tokenizer.json"), e.getMessage());
        assertTrue(e.getMessage().contains("JSON"), e.getMessage());
        assertThrows(CheckpointException.class, () -> load("[]"));
        assertThrows(CheckpointException.class, () -> load("{\"added_tokens\": []}"));
    }

    @Test
    void jsonThatIsNotATokenizerIsRejectedByTheNativeLibraryWithoutACrash() throws IOException {
        CheckpointException e = assertThrows(CheckpointException.class, () -> load("{\"model\": {}}"));
        assertTrue(e.getMessage().contains("rejected"), e.getMessage());
        String badVocab = GPT_NEOX_LIKE.replace("\"vocab\": {", "\"vocab\": 5, \"x\": {");
        assertThrows(CheckpointException.class, () -> load(badVocab));
        assertThrows(CheckpointException.class, () -> Tokenizer.fromJson("{\"model\": {\"type\": \"Nope\"}}", "mem"));
        // the library still works afterwards
        try (Tokenizer t = load(GPT_NEOX_LIKE)) {
            assertArrayEquals(new int[] {13}, t.encode("hello"));
        }
    }

    @Test
    void closeIsIdempotentAndUseAfterCloseFails() throws IOException {
        Tokenizer t = load(GPT_NEOX_LIKE);
        t.close();
        t.close();
        assertThrows(IllegalStateException.class, () -> t.encode("hello"));
        assertThrows(IllegalStateException.class, () -> t.decode(new int[] {13}));
    }

    @Test
    void djlIsKeptOffline() throws IOException {
        try (Tokenizer t = Tokenizer.fromJson(GPT_NEOX_LIKE, "mem")) {
            assertEquals(1, t.encode("hello").length);
        }
        if (System.getenv("DJL_OFFLINE") == null) {
            assertEquals("true", System.getProperty("ai.djl.offline"));
        }
        if (System.getenv("OPT_OUT_TRACKING") == null) {
            assertTrue(System.getProperty("OPT_OUT_TRACKING") != null);
        }
    }
}
