package org.mamba4j.lm;

import ai.djl.huggingface.tokenizers.HuggingFaceTokenizer;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Iterator;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import java.util.function.IntConsumer;
import org.mamba4j.CheckpointException;
import org.mamba4j.MambaException;

/**
 * A HuggingFace {@code tokenizer.json} tokenizer, backed by DJL's bindings to the Rust {@code
 * tokenizers} library ({@code ai.djl.huggingface:tokenizers}).
 *
 * <h2>No special tokens, no truncation, no padding</h2>
 *
 * {@link #encode(String)} adds no special tokens: the GPT-NeoX tokenizer used by Mamba adds none for
 * generation anyway, and a caller that wants a BOS token can prepend its id. Truncation and padding
 * configured in the file (and DJL's default 512-token truncation) are switched off, so a prompt of
 * any length encodes completely. {@link #decode(int[])} keeps special tokens, like transformers'
 * {@code decode} by default; {@link #decode(int[], boolean)} can skip them.
 *
 * <h2>Native library and network</h2>
 *
 * The DJL jar bundles the native library for linux-x86_64, linux-aarch64, osx-aarch64 and
 * win-x86_64. On first use DJL copies it into {@code <cache>/tokenizers/<version>-<platform>/} and
 * loads it from there; {@code <cache>} is the {@code ENGINE_CACHE_DIR} environment variable or system
 * property, else {@code DJL_CACHE_DIR}, else {@code ~/.djl.ai} (or {@code java.io.tmpdir/.djl.ai} when
 * the home folder is not writable). Nothing is downloaded for a tokenizer read from a file, but DJL's
 * factory methods "call home" (an EC2 instance-metadata look-up and a telemetry request) unless
 * offline mode or tracking opt-out is set. Before the first DJL call this class therefore sets the
 * system properties {@code ai.djl.offline=true} and {@code OPT_OUT_TRACKING=true}, each only when
 * neither that system property nor the matching environment variable ({@code DJL_OFFLINE}, {@code
 * OPT_OUT_TRACKING}) is already set, so an explicit user choice wins.
 *
 * <p>Encoding and decoding may run on several threads at once; {@link #close()} waits for calls in
 * progress and makes later calls throw {@link IllegalStateException}.
 */
public final class Tokenizer implements AutoCloseable {

    /** Added-token contents recognised as end-of-sequence, in order of preference. */
    private static final String[] EOS_NAMES = {"<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>"};

    /** Larger than any real tokenizer.json (the big ones are tens of MiB). */
    private static final long MAX_FILE_BYTES = 512L << 20;

    private static final ObjectMapper MAPPER = new ObjectMapper();
    private static boolean djlConfigured;

    private final HuggingFaceTokenizer hf;
    private final String source;
    private final Integer eosTokenId;
    private final int vocabSize;
    private final ReentrantReadWriteLock lock = new ReentrantReadWriteLock();
    private boolean closed;
    /** Test hook: told the length of every decode, so tests can bound the work of stream decoding. */
    volatile IntConsumer decodeProbe;

    private Tokenizer(HuggingFaceTokenizer hf, String source, Integer eosTokenId, int vocabSize) {
        this.hf = hf;
        this.source = source;
        this.eosTokenId = eosTokenId;
        this.vocabSize = vocabSize;
    }

    /**
     * Loads a {@code tokenizer.json}, or the {@code tokenizer.json} inside a folder. When the folder
     * also holds {@code tokenizer_config.json} or {@code special_tokens_map.json}, their {@code
     * eos_token} decides {@link #eosTokenId()}.
     *
     * @throws CheckpointException when the file is missing, unreadable, not JSON, or not a tokenizer
     * @throws MambaException when the native tokenizers library cannot be loaded on this platform
     */
    public static Tokenizer fromFile(Path tokenizerJson) {
        Objects.requireNonNull(tokenizerJson, "tokenizerJson");
        Path file = Files.isDirectory(tokenizerJson) ? tokenizerJson.resolve("tokenizer.json") : tokenizerJson;
        if (!Files.isRegularFile(file)) {
            throw new CheckpointException("tokenizer not found: " + file);
        }
        String json = readText(file, "tokenizer");
        String configuredEos = null;
        Path folder = file.toAbsolutePath().getParent();
        if (folder != null) {
            for (String name : new String[] {"tokenizer_config.json", "special_tokens_map.json"}) {
                Path side = folder.resolve(name);
                if (configuredEos == null && Files.isRegularFile(side)) {
                    configuredEos = eosTokenName(side);
                }
            }
        }
        return load(json, file.toString(), configuredEos);
    }

    /**
     * Builds a tokenizer from the text of a {@code tokenizer.json}.
     *
     * @param sourceName what to call it in error messages
     * @throws CheckpointException when the text is not JSON or not a tokenizer
     */
    public static Tokenizer fromJson(String json, String sourceName) {
        Objects.requireNonNull(json, "json");
        return load(json, sourceName == null ? "tokenizer.json" : sourceName, null);
    }

    private static Tokenizer load(String json, String source, String configuredEos) {
        JsonNode root;
        try {
            root = MAPPER.readTree(json);
        } catch (JsonProcessingException e) {
            throw new CheckpointException(
                    source + ": not a valid tokenizer.json, JSON does not parse: " + e.getOriginalMessage()
                            + (e.getLocation() == null ? "" : " (line " + e.getLocation().getLineNr()
                                    + ", column " + e.getLocation().getColumnNr() + ")"),
                    e);
        }
        if (root == null || !root.isObject()) {
            throw new CheckpointException(source + ": not a valid tokenizer.json, expected a JSON object");
        }
        if (!root.path("model").isObject()) {
            throw new CheckpointException(source + ": not a valid tokenizer.json, missing the 'model' object");
        }
        int vocab = vocabSizeOf(root);
        Integer eos = configuredEos == null ? null : idOf(root, configuredEos);
        if (eos == null) {
            eos = defaultEos(root);
        }

        configureDjl();
        HuggingFaceTokenizer hf;
        try {
            hf = HuggingFaceTokenizer.newInstance(
                    new ByteArrayInputStream(json.getBytes(StandardCharsets.UTF_8)),
                    Map.of("addSpecialTokens", "false", "truncation", "false", "padding", "false"));
        } catch (IOException | RuntimeException e) {
            if (isNativeLoadFailure(e)) {
                throw new MambaException(
                        "cannot load the HuggingFace tokenizers native library bundled with DJL on "
                                + System.getProperty("os.name") + "/" + System.getProperty("os.arch") + ": "
                                + e.getMessage(),
                        e);
            }
            throw new CheckpointException(source + ": the tokenizers library rejected it: " + e.getMessage(), e);
        } catch (LinkageError e) {
            throw new MambaException(
                    "cannot load the HuggingFace tokenizers native library bundled with DJL on "
                            + System.getProperty("os.name") + "/" + System.getProperty("os.arch") + ": " + e,
                    e);
        }
        return new Tokenizer(hf, source, eos, vocab);
    }

    /**
     * Whether DJL failed to load its native library, rather than rejected the file. Its own message starts with
     * "Failed to load Huggingface native"; an error of the native parser is thrown by a native method and may
     * quote the file (a fuzzed {@code "version"} holding that phrase was once reported as a missing library).
     */
    private static boolean isNativeLoadFailure(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof LinkageError) {
                return true;
            }
            StackTraceElement[] where = t.getStackTrace();
            boolean fromParser = where.length > 0 && where[0].isNativeMethod();
            if (!fromParser && t.getMessage() != null && t.getMessage().startsWith("Failed to load Huggingface native")) {
                return true;
            }
        }
        return false;
    }

    /**
     * Keeps DJL from reaching the network: sets {@code ai.djl.offline} and {@code OPT_OUT_TRACKING} to
     * true unless the user set them (as system property or environment variable).
     */
    private static synchronized void configureDjl() {
        if (djlConfigured) {
            return;
        }
        setUnlessSet("ai.djl.offline", "DJL_OFFLINE");
        setUnlessSet("OPT_OUT_TRACKING", "OPT_OUT_TRACKING");
        djlConfigured = true;
    }

    private static void setUnlessSet(String property, String env) {
        String fromEnv;
        try {
            fromEnv = System.getenv(env);
        } catch (SecurityException e) {
            fromEnv = null;
        }
        if (fromEnv == null && System.getProperty(property) == null) {
            System.setProperty(property, "true");
        }
    }

    // ---------------------------------------------------------------- JSON helpers

    private static String readText(Path file, String what) {
        try {
            long size = Files.size(file);
            if (size > MAX_FILE_BYTES) {
                throw new CheckpointException(
                        file + ": " + size + " bytes is too large for a " + what + " file (at most "
                                + MAX_FILE_BYTES + ")");
            }
            return Files.readString(file, StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new CheckpointException(file + ": cannot read " + what + ": " + e, e);
        }
    }

    /** The {@code eos_token} of a tokenizer_config.json or special_tokens_map.json, or null. */
    private static String eosTokenName(Path file) {
        try {
            JsonNode root = MAPPER.readTree(readText(file, "tokenizer config"));
            JsonNode eos = root == null ? null : root.get("eos_token");
            if (eos == null) {
                return null;
            }
            if (eos.isTextual()) {
                return eos.textValue();
            }
            if (eos.isObject() && eos.path("content").isTextual()) {
                return eos.path("content").textValue();
            }
            return null;
        } catch (JsonProcessingException e) {
            throw new CheckpointException(file + ": not valid JSON: " + e.getOriginalMessage(), e);
        }
    }

    private static Integer idOf(JsonNode root, String content) {
        for (JsonNode t : root.path("added_tokens")) {
            if (content.equals(t.path("content").asText(null)) && t.path("id").canConvertToInt()) {
                return t.path("id").intValue();
            }
        }
        JsonNode vocab = root.path("model").path("vocab");
        if (vocab.isObject() && vocab.path(content).canConvertToInt()) {
            return vocab.path(content).intValue();
        }
        return null;
    }

    private static Integer defaultEos(JsonNode root) {
        for (String name : EOS_NAMES) {
            for (JsonNode t : root.path("added_tokens")) {
                if (name.equals(t.path("content").asText(null)) && t.path("id").canConvertToInt()) {
                    return t.path("id").intValue();
                }
            }
        }
        return null;
    }

    private static int vocabSizeOf(JsonNode root) {
        long max = -1;
        JsonNode vocab = root.path("model").path("vocab");
        if (vocab.isObject()) {
            for (Iterator<JsonNode> it = vocab.elements(); it.hasNext(); ) {
                JsonNode id = it.next();
                if (id.canConvertToLong()) {
                    max = Math.max(max, id.longValue());
                }
            }
        } else if (vocab.isArray()) {
            max = vocab.size() - 1L; // Unigram: [[piece, score], ...], the index is the id
        }
        for (JsonNode t : root.path("added_tokens")) {
            if (t.path("id").canConvertToLong()) {
                max = Math.max(max, t.path("id").longValue());
            }
        }
        return (int) Math.min(Integer.MAX_VALUE, max + 1);
    }

    // ---------------------------------------------------------------- API

    /**
     * Splits text into token ids, adding no special tokens and truncating nothing.
     *
     * @throws IllegalStateException after {@link #close()}
     */
    public int[] encode(String text) {
        Objects.requireNonNull(text, "text");
        long[] ids;
        lock.readLock().lock();
        try {
            ensureOpen();
            ids = hf.encode(text, false, false).getIds();
        } finally {
            lock.readLock().unlock();
        }
        int[] out = new int[ids.length];
        for (int i = 0; i < ids.length; i++) {
            out[i] = Math.toIntExact(ids[i]);
        }
        return out;
    }

    /** Turns token ids back into text, keeping special tokens; ids the tokenizer does not know are skipped. */
    public String decode(int[] ids) {
        return decode(ids, false);
    }

    /**
     * Turns token ids back into text.
     *
     * @param skipSpecialTokens whether special tokens such as {@code <|endoftext|>} are left out
     * @throws IllegalArgumentException when an id is negative
     */
    public String decode(int[] ids, boolean skipSpecialTokens) {
        Objects.requireNonNull(ids, "ids");
        return decode(ids, ids.length, skipSpecialTokens);
    }

    private String decode(int[] ids, int length, boolean skipSpecialTokens) {
        IntConsumer probe = decodeProbe;
        if (probe != null) {
            probe.accept(length);
        }
        long[] wide = new long[length];
        for (int i = 0; i < length; i++) {
            if (ids[i] < 0) {
                throw new IllegalArgumentException("ids[" + i + "] = " + ids[i] + " is not a token id");
            }
            wide[i] = ids[i];
        }
        lock.readLock().lock();
        try {
            ensureOpen();
            return hf.decode(wide, skipSpecialTokens);
        } finally {
            lock.readLock().unlock();
        }
    }

    /** A decoder for text generated one token at a time, keeping special tokens. */
    public StreamDecoder streamDecoder() {
        return new StreamDecoder(false);
    }

    /** A decoder for text generated one token at a time. */
    public StreamDecoder streamDecoder(boolean skipSpecialTokens) {
        return new StreamDecoder(skipSpecialTokens);
    }

    /**
     * The end-of-sequence token: the {@code eos_token} of a sibling tokenizer_config.json or
     * special_tokens_map.json when there is one, else the first added token named {@code
     * <|endoftext|>}, {@code </s>}, {@code <|end_of_text|>} or {@code <eos>}; null when none.
     */
    public Integer eosTokenId() {
        return eosTokenId;
    }

    /** One more than the largest id in the model vocabulary and the added tokens. */
    public int vocabSize() {
        return vocabSize;
    }

    /** Frees the native tokenizer; idempotent. */
    @Override
    public void close() {
        lock.writeLock().lock();
        try {
            if (!closed) {
                closed = true;
                hf.close();
            }
        } finally {
            lock.writeLock().unlock();
        }
    }

    private void ensureOpen() {
        if (closed) {
            throw new IllegalStateException("tokenizer " + source + " is closed");
        }
    }

    @Override
    public String toString() {
        return "Tokenizer{" + source + ", vocabSize=" + vocabSize + ", eos=" + eosTokenId + '}';
    }

    /**
     * Turns a stream of generated token ids into a stream of text, decoding only a bounded window of recent
     * tokens per push (the "prefix offset / read offset" scheme of HF text-generation-inference).
     *
     * <p>A token's text can depend on its neighbours (a SentencePiece leading space is dropped at the start
     * of a decode; a byte-fallback or byte-level token may be half a UTF-8 character), so new tokens are never
     * decoded alone: each push decodes the <em>context</em> — the tokens of the last emitted piece — followed by
     * the tokens not yet emitted, and returns what lies beyond the context's own text. While that new text is
     * empty or ends in U+FFFD (an unfinished multi-byte character), nothing is returned and the pending tokens
     * accumulate; the character comes out whole with the push that completes it, and those tokens become the
     * next context. Per push that is at most two decodes of a few tokens, whatever the length of the sequence.
     *
     * <p>At most {@value #MAX_PENDING} tokens are held back: a run that long without new text (skipped special
     * tokens, or bytes that never form a character) is emitted as it decodes, and the following tokens are
     * decoded after the same context as if the run were not there. Concatenating every returned piece and
     * {@link #flush()} gives {@link Tokenizer#decode(int[])} of all pushed ids, except around bytes that never
     * form a character: a byte-fallback decoder turns a whole run of byte tokens into U+FFFD when one of them
     * is invalid, also characters of the run already streamed; and a capped run may end inside a character.
     *
     * <p>Not thread-safe; one decoder per generated sequence.
     */
    public final class StreamDecoder {
        /** Tokens held back before they are emitted as they stand: far more than any character needs (4 bytes). */
        static final int MAX_PENDING = 64;

        private final boolean skipSpecialTokens;
        private int[] ids = new int[32];
        private int size;
        private int readOffset;              // ids[readOffset, size) are pending: pushed, not yet emitted
        private int[] context = new int[0];  // the tokens of the last emitted piece
        private String contextText = "";     // decode(context)
        private String pending = "";         // the text of the pending tokens so far (held back)
        private final StringBuilder emitted = new StringBuilder();

        private StreamDecoder(boolean skipSpecialTokens) {
            this.skipSpecialTokens = skipSpecialTokens;
        }

        /** Adds one token and returns the new text since the last push (possibly empty). */
        public String push(int id) {
            if (id < 0) {
                throw new IllegalArgumentException(id + " is not a token id");
            }
            if (size == ids.length) {
                ids = Arrays.copyOf(ids, size * 2);
            }
            ids[size++] = id;
            int[] window = Arrays.copyOf(context, context.length + size - readOffset);
            System.arraycopy(ids, readOffset, window, context.length, size - readOffset);
            String text = decode(window, window.length, skipSpecialTokens);
            String fresh = text.length() > contextText.length() ? text.substring(contextText.length()) : "";
            if (!fresh.isEmpty() && !fresh.endsWith("\uFFFD")) {
                return emit(fresh, true);
            }
            if (size - readOffset >= MAX_PENDING) {
                return emit(fresh, false);  // a long run without a character: out it goes, the context stays
            }
            pending = fresh;
            return "";
        }

        /** Returns the text held back so far (an unfinished character at the end), and marks it emitted. */
        public String flush() {
            return pending.isEmpty() ? "" : emit(pending, true);
        }

        /** Emits {@code text} for the pending tokens, which become the context if {@code newContext}. */
        private String emit(String text, boolean newContext) {
            if (newContext) {
                context = Arrays.copyOfRange(ids, readOffset, size);
                contextText = decode(context, context.length, skipSpecialTokens);
            }
            readOffset = size;
            pending = "";
            emitted.append(text);
            return text;
        }

        /** The decoded text of the tokens pushed so far: everything emitted, then anything held back. */
        public String text() {
            return emitted + pending;
        }

        /** A copy of the tokens pushed so far. */
        public int[] ids() {
            return Arrays.copyOf(ids, size);
        }

        /** Number of tokens pushed. */
        public int size() {
            return size;
        }
    }
}
