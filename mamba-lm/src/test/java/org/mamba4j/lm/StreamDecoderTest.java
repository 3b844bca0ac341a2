package org.mamba4j.lm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * {@link Tokenizer.StreamDecoder} against the full decode, on the two tokenizer families Mamba checkpoints
 * use: SentencePiece-style byte fallback (multi-byte characters spelled as {@code <0xE2>} tokens, leading
 * spaces that the decoder strips at the start of a decode) and byte-level BPE. The work per token is
 * measured through {@link Tokenizer#decodeProbe}: it must not grow with the sequence.
 */
class StreamDecoderTest {
    private static final int UNK = 0, BOS = 1, EOS = 2, BYTE0 = 3, SPACE = 259, HELLO = 260, WORLD = 261, SPACE_E = 262,
            E_ACUTE = 263, BANG = 264, A = 265, B = 266;

    /** A Llama-like tokenizer: BPE with byte fallback, Metaspace-style decoding that strips one leading space. */
    static String byteFallbackJson() {
        StringBuilder vocab = new StringBuilder("{\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2");
        for (int b = 0; b < 256; b++) vocab.append(String.format(", \"<0x%02X>\": %d", b, BYTE0 + b));
        vocab.append(", \"\\u2581\": 259, \"\\u2581hello\": 260, \"\\u2581world\": 261, \"\\u2581\\u00e9\": 262,"
                + " \"\\u00e9\": 263, \"!\": 264, \"\\u2581a\": 265, \"b\": 266}");
        String special = "\"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true";
        return "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,\n"
                + " \"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", " + special + "}, {\"id\": 1, \"content\": \"<s>\", "
                + special + "}, {\"id\": 2, \"content\": \"</s>\", " + special + "}],\n"
                + " \"normalizer\": null, \"pre_tokenizer\": null, \"post_processor\": null,\n"
                + " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"\\u2581\"},"
                + " \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"},"
                + " {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]},\n"
                + " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": \"<unk>\", \"continuing_subword_prefix\": null,"
                + " \"end_of_word_suffix\": null, \"fuse_unk\": true, \"byte_fallback\": true, \"vocab\": " + vocab
                + ", \"merges\": []}}";
    }

    private static int[] bytes(String s) {
        byte[] utf8 = s.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        int[] ids = new int[utf8.length];
        for (int i = 0; i < utf8.length; i++) ids[i] = BYTE0 + (utf8[i] & 0xFF);
        return ids;
    }

    /**
     * Words, characters spelled in bytes (2, 3 and 4 bytes), specials, and a lone lead byte that never completes.
     * The lone byte sits between non-byte tokens: ByteFallback turns a whole run of byte tokens into U+FFFD when
     * one is invalid, so a stray byte right after "😀" would spoil the emoji after it was streamed (for any
     * streaming decoder; the full decode sees the run at once).
     */
    private static final int[][] PIECES = {
        {HELLO}, {WORLD}, {SPACE_E}, {E_ACUTE}, {BANG}, {A}, {B}, {SPACE}, bytes("€"), bytes("😀"), bytes("é"),
        bytes(" ü"), {SPACE, BYTE0 + 0xE2, BANG}, {EOS}, {BOS}, {UNK},
    };

    @BeforeAll
    static void keepDjlCacheInTheBuildFolder() {
        TokenizerTest.keepDjlCacheInTheBuildFolder();
    }

    /** Equal strings, or a failure that shows where they part (the random texts are long). */
    private static void assertSameText(String expected, String actual, String what) {
        if (expected.equals(actual)) return;
        int i = 0;
        while (i < Math.min(expected.length(), actual.length()) && expected.charAt(i) == actual.charAt(i)) i++;
        int from = Math.max(0, i - 20);
        assertEquals(expected.substring(from, Math.min(expected.length(), i + 20)),
                actual.substring(from, Math.min(actual.length(), i + 20)), what + ": texts differ at char " + i);
    }

    /** Pushes every id, returns what the decoder emitted (pieces + flush), after checking {@code text()}. */
    private static String stream(Tokenizer.StreamDecoder d, int[] ids) {
        StringBuilder out = new StringBuilder();
        for (int id : ids) out.append(d.push(id));
        out.append(d.flush());
        assertEquals(out.toString(), d.text());
        return out.toString();
    }

    @Test
    void byteFallbackAndLeadingSpacesStreamExactly() {
        try (Tokenizer t = Tokenizer.fromJson(byteFallbackJson(), "byte-fallback")) {
            int[] ids = concat(new int[] {HELLO, WORLD}, bytes("€"), new int[] {WORLD}, bytes("😀"), new int[] {SPACE_E, BANG});
            assertEquals("hello world€ world😀 é!", t.decode(ids));
            Tokenizer.StreamDecoder d = t.streamDecoder();
            List<String> pieces = new ArrayList<>();
            for (int id : ids) pieces.add(d.push(id));
            // a leading space survives because " world" is decoded after its context, not alone ("world")
            assertEquals(List.of("hello", " world", "", "", "€", " world", "", "", "", "😀", " é", "!"), pieces);
            assertEquals("", d.flush());

            Random random = new Random(7);
            for (boolean skip : new boolean[] {false, true}) {
                for (int trial = 0; trial < 20; trial++) {
                    int[] seq = randomSequence(random, 200);
                    assertSameText(t.decode(seq, skip), stream(t.streamDecoder(skip), seq), "trial " + trial + ", skip " + skip);
                }
            }
        }
    }

    @Test
    void byteLevelBpeStreamsExactly() {
        try (Tokenizer t = Tokenizer.fromJson(TokenizerTest.GPT_NEOX_LIKE, "byte-level")) {
            Random random = new Random(11);
            int[] pool = {13, 18, 19, 20, 21, 20, 21, 6, 0, 1};  // 20 21 = the two bytes of "é"; a lone 20 is junk
            for (int trial = 0; trial < 20; trial++) {
                int[] seq = new int[300];
                for (int i = 0; i < seq.length; i++) seq[i] = pool[random.nextInt(pool.length)];
                for (boolean skip : new boolean[] {false, true})
                    assertSameText(t.decode(seq, skip), stream(t.streamDecoder(skip), seq), "trial " + trial);
            }
        }
    }

    /** Re-decoding the whole sequence per token (the old decoder) costs n²/2 decoded tokens: 33M for these 8000. */
    @Test
    void workPerTokenIsBounded() {
        try (Tokenizer t = Tokenizer.fromJson(byteFallbackJson(), "byte-fallback")) {
            int[] seq = randomSequence(new Random(3), 5000);  // about 8000 tokens
            AtomicInteger calls = new AtomicInteger(), longest = new AtomicInteger();
            AtomicLong decoded = new AtomicLong();
            t.decodeProbe = n -> {
                calls.incrementAndGet();
                decoded.addAndGet(n);
                longest.accumulateAndGet(n, Math::max);
            };
            String streamed = stream(t.streamDecoder(), seq);
            t.decodeProbe = null;
            assertSameText(t.decode(seq), streamed, seq.length + " tokens");
            assertTrue(calls.get() <= 2 * seq.length + 1, "decode calls: " + calls);
            assertTrue(longest.get() <= 2 * Tokenizer.StreamDecoder.MAX_PENDING, "longest decode: " + longest + " tokens");
            assertTrue(decoded.get() <= 16L * seq.length, "tokens decoded: " + decoded + " for " + seq.length);
        }
    }

    /** A long run without text (skipped specials) is capped, and the text after it still decodes in context. */
    @Test
    void longRunsWithoutTextStayBoundedAndExact() {
        try (Tokenizer t = Tokenizer.fromJson(byteFallbackJson(), "byte-fallback")) {
            int[] seq = new int[302];
            java.util.Arrays.fill(seq, EOS);
            seq[0] = HELLO;
            seq[301] = WORLD;
            AtomicInteger longest = new AtomicInteger();
            t.decodeProbe = n -> longest.accumulateAndGet(n, Math::max);
            assertEquals("hello world", stream(t.streamDecoder(true), seq));
            assertTrue(longest.get() <= 2 * Tokenizer.StreamDecoder.MAX_PENDING, "longest decode: " + longest);
            t.decodeProbe = null;
            assertSameText(t.decode(seq, false), stream(t.streamDecoder(false), seq), "specials kept");
        }
    }

    @Test
    void unfinishedCharacterIsHeldBackUntilFlush() {
        try (Tokenizer t = Tokenizer.fromJson(byteFallbackJson(), "byte-fallback")) {
            Tokenizer.StreamDecoder d = t.streamDecoder();
            int[] euro = bytes("€");
            assertEquals("hello", d.push(HELLO));
            assertEquals("", d.push(euro[0]));
            assertEquals("", d.push(euro[1]));
            assertEquals("hello\uFFFD\uFFFD", d.text());  // what a decode of everything so far gives
            assertFalse(d.flush().isEmpty());
            assertEquals(t.decode(d.ids()), d.text());
        }
    }

    private static int[] randomSequence(Random random, int pieces) {
        List<Integer> out = new ArrayList<>();
        for (int i = 0; i < pieces; i++) for (int id : PIECES[random.nextInt(PIECES.length)]) out.add(id);
        return out.stream().mapToInt(Integer::intValue).toArray();
    }

    private static int[] concat(int[]... parts) {
        return java.util.Arrays.stream(parts).flatMapToInt(java.util.Arrays::stream).toArray();
    }
}
