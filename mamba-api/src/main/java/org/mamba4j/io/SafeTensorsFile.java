package org.mamba4j.io;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.CharBuffer;
import java.nio.FloatBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Comparator;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.mamba4j.CheckpointException;

/**
 * An open safetensors file: its validated header and positional access to tensor data.
 *
 * <p>{@link #open(Path)} checks the whole header against the file before returning: lengths, JSON
 * syntax, types, shapes, byte ranges and overlaps. A file that passes cannot make a later read allocate
 * more than its declared tensor, or read outside the data region. Tensor data is read through positional
 * {@link FileChannel} reads in chunks of {@value SafeTensors#CHUNK_BYTES} bytes.
 *
 * <p>Not thread-safe: readers share one chunk buffer.
 */
public final class SafeTensorsFile implements AutoCloseable {

    /** Dtypes {@link #readFloats} converts; all are exactly or (F64) nearly representable as float. */
    private static final Set<StoredDType> FLOAT_DTYPES =
            EnumSet.of(StoredDType.F32, StoredDType.F16, StoredDType.BF16, StoredDType.F64);

    /** A valid header is three levels deep; a tight limit stops nesting bombs early. */
    private static final int MAX_JSON_DEPTH = 16;

    /** Largest Java array the JVM reliably allocates. */
    private static final int MAX_ARRAY_LENGTH = Integer.MAX_VALUE - 8;

    private static final ObjectMapper MAPPER = JsonMapper.builder(JsonFactory.builder()
                    .streamReadConstraints(StreamReadConstraints.builder().maxNestingDepth(MAX_JSON_DEPTH).build())
                    .build())
            .enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION)
            .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
            .build();

    private final Path path;
    private final FileChannel channel;
    private final long dataStart;
    private final Map<String, String> metadata;
    private final List<TensorInfo> tensors;
    private final Map<String, TensorInfo> byName;
    private ByteBuffer chunk;
    private boolean closed;

    private SafeTensorsFile(Path path, FileChannel channel, long dataStart, Map<String, String> metadata,
            List<TensorInfo> tensors) {
        this.path = path;
        this.channel = channel;
        this.dataStart = dataStart;
        this.metadata = metadata;
        this.tensors = tensors;
        this.byName = new HashMap<>();
        for (TensorInfo t : tensors) {
            byName.put(t.name(), t);
        }
    }

    /**
     * Opens a safetensors file and validates its header completely.
     *
     * @param file the file to open
     * @return the open file; close it to release the channel
     * @throws CheckpointException if the file is missing or unreadable, or its header is malformed,
     *     inconsistent with the file size, or hostile; the message names the file and the problem
     */
    public static SafeTensorsFile open(Path file) {
        if (Files.isDirectory(file)) {
            throw new CheckpointException("safetensors path " + file + " is a directory, not a file");
        }
        FileChannel ch;
        try {
            ch = FileChannel.open(file, StandardOpenOption.READ);
        } catch (NoSuchFileException e) {
            throw new CheckpointException("safetensors file not found: " + file, e);
        } catch (IOException e) {
            throw new CheckpointException("cannot open safetensors file " + file + ": " + e, e);
        }
        try {
            return parse(file, ch);
        } catch (IOException e) {
            closeQuietly(ch, e);
            throw new CheckpointException("cannot read safetensors file " + file + ": " + e, e);
        } catch (RuntimeException | Error e) {
            closeQuietly(ch, e);
            throw e;
        }
    }

    private static SafeTensorsFile parse(Path file, FileChannel ch) throws IOException {
        long size = ch.size();
        if (size < Long.BYTES) {
            throw corrupt(file, "file too short (" + size + " bytes) to hold the 8-byte header length");
        }
        ByteBuffer prefix = ByteBuffer.allocate(Long.BYTES).order(ByteOrder.LITTLE_ENDIAN);
        readFully(file, ch, prefix, 0);
        // the length is unsigned: a negative long is a value >= 2^63
        long headerLength = prefix.flip().getLong();
        if (headerLength == 0) {
            throw corrupt(file, "empty header (header length 0)");
        }
        if (headerLength < 0 || headerLength > SafeTensors.MAX_HEADER_BYTES) {
            throw corrupt(file, "absurd header length " + Long.toUnsignedString(headerLength)
                    + " (limit " + SafeTensors.MAX_HEADER_BYTES + " bytes)");
        }
        if (headerLength > size - Long.BYTES) {
            throw corrupt(file, "header length " + headerLength + " exceeds the " + (size - Long.BYTES)
                    + " bytes after the length prefix (file truncated?)");
        }
        ByteBuffer headerBytes = ByteBuffer.allocate((int) headerLength);
        readFully(file, ch, headerBytes, Long.BYTES);
        String json = decodeUtf8(file, headerBytes.flip());
        JsonNode root;
        try {
            root = MAPPER.readTree(json);
        } catch (JsonProcessingException e) {
            throw new CheckpointException(prefix(file) + "header is not valid JSON: " + e.getOriginalMessage(), e);
        }
        if (root == null || !root.isObject()) {
            throw corrupt(file, "header must be a JSON object, found " + (root == null ? "nothing" : root.getNodeType()));
        }

        long dataStart = Long.BYTES + headerLength;
        long dataLength = size - dataStart;
        Map<String, String> metadata = Map.of();
        List<TensorInfo> tensors = new ArrayList<>();
        for (Map.Entry<String, JsonNode> field : root.properties()) {
            if (field.getKey().equals(SafeTensors.METADATA_KEY)) {
                metadata = parseMetadata(file, field.getValue());
            } else {
                tensors.add(parseTensor(file, field.getKey(), field.getValue(), dataLength));
            }
        }
        tensors.sort(Comparator.comparingLong(TensorInfo::begin).thenComparingLong(TensorInfo::end)
                .thenComparing(TensorInfo::name));
        for (int i = 1; i < tensors.size(); i++) {
            TensorInfo prev = tensors.get(i - 1);
            TensorInfo cur = tensors.get(i);
            if (cur.begin() < prev.end()) {
                throw corrupt(file, "tensors '" + prev.name() + "' [" + prev.begin() + ", " + prev.end()
                        + ") and '" + cur.name() + "' [" + cur.begin() + ", " + cur.end() + ") overlap");
            }
        }
        return new SafeTensorsFile(file, ch, dataStart, metadata, List.copyOf(tensors));
    }

    private static String decodeUtf8(Path file, ByteBuffer bytes) {
        // strict decoding: Jackson would otherwise guess UTF-16/32 or substitute bad bytes
        try {
            CharBuffer chars = StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(bytes);
            return chars.toString();
        } catch (CharacterCodingException e) {
            throw new CheckpointException(prefix(file) + "header is not valid UTF-8", e);
        }
    }

    private static Map<String, String> parseMetadata(Path file, JsonNode node) {
        if (!node.isObject()) {
            throw corrupt(file, SafeTensors.METADATA_KEY + " must be a JSON object, found " + node.getNodeType());
        }
        Map<String, String> metadata = new LinkedHashMap<>();
        for (Map.Entry<String, JsonNode> e : node.properties()) {
            if (!e.getValue().isTextual()) {
                throw corrupt(file, "metadata value of '" + e.getKey() + "' must be a string, found "
                        + e.getValue().getNodeType());
            }
            metadata.put(e.getKey(), e.getValue().textValue());
        }
        return Collections.unmodifiableMap(metadata);
    }

    private static TensorInfo parseTensor(Path file, String name, JsonNode node, long dataLength) {
        if (name.isEmpty()) {
            throw corrupt(file, "tensor name is empty");
        }
        String what = "tensor '" + name + "'";
        if (!node.isObject()) {
            throw corrupt(file, what + " must be a JSON object, found " + node.getNodeType());
        }
        for (Map.Entry<String, JsonNode> e : node.properties()) {
            String key = e.getKey();
            if (!key.equals("dtype") && !key.equals("shape") && !key.equals("data_offsets")) {
                throw corrupt(file, what + " has unexpected field '" + key + "'");
            }
        }

        JsonNode dtypeNode = node.get("dtype");
        if (dtypeNode == null || !dtypeNode.isTextual()) {
            throw corrupt(file, what + " needs a string field 'dtype'");
        }
        StoredDType dtype = StoredDType.fromSafetensorsName(dtypeNode.textValue())
                .orElseThrow(() -> corrupt(file, what + " has unknown dtype '" + dtypeNode.textValue() + "'"));

        JsonNode shapeNode = node.get("shape");
        if (shapeNode == null || !shapeNode.isArray()) {
            throw corrupt(file, what + " needs an array field 'shape'");
        }
        if (shapeNode.size() > SafeTensors.MAX_RANK) {
            throw corrupt(file, what + " has " + shapeNode.size() + " dims, at most " + SafeTensors.MAX_RANK
                    + " are allowed");
        }
        long[] shape = new long[shapeNode.size()];
        long count = 1;
        for (int i = 0; i < shape.length; i++) {
            shape[i] = nonNegativeLong(file, what + " shape[" + i + "]", shapeNode.get(i));
            try {
                count = Math.multiplyExact(count, shape[i]);
            } catch (ArithmeticException e) {
                throw corrupt(file, what + " shape " + shapeNode + " overflows a 64-bit element count");
            }
        }
        long bytes;
        try {
            bytes = Math.multiplyExact(count, dtype.byteSize());
        } catch (ArithmeticException e) {
            throw corrupt(file, what + " shape " + shapeNode + " of " + dtype + " overflows a 64-bit byte count");
        }

        JsonNode offsets = node.get("data_offsets");
        if (offsets == null || !offsets.isArray() || offsets.size() != 2) {
            throw corrupt(file, what + " needs a field 'data_offsets' holding [begin, end]");
        }
        long begin = nonNegativeLong(file, what + " data_offsets begin", offsets.get(0));
        long end = nonNegativeLong(file, what + " data_offsets end", offsets.get(1));
        if (begin > end) {
            throw corrupt(file, what + " data_offsets begin " + begin + " is after end " + end);
        }
        if (end > dataLength) {
            throw corrupt(file, what + " data_offsets end " + end + " is beyond the data region of "
                    + dataLength + " bytes (file truncated?)");
        }
        if (end - begin != bytes) {
            throw corrupt(file, what + " size mismatch: data_offsets span " + (end - begin)
                    + " bytes but shape " + Arrays.toString(shape) + " of " + dtype + " needs " + bytes);
        }
        return new TensorInfo(name, dtype, shape, begin, end);
    }

    private static long nonNegativeLong(Path file, String what, JsonNode n) {
        // integral excludes 1.0 and 1e3; canConvertToLong excludes integers beyond 64 bits
        if (!n.isIntegralNumber() || !n.canConvertToLong()) {
            throw corrupt(file, what + " must be an integer, found " + n);
        }
        long v = n.longValue();
        if (v < 0) {
            throw corrupt(file, what + " is negative (" + v + ")");
        }
        return v;
    }

    /**
     * Returns the path this file was opened from.
     *
     * @return the path given to {@link #open(Path)}
     */
    public Path path() {
        return path;
    }

    /**
     * Returns the header's {@value SafeTensors#METADATA_KEY} entries.
     *
     * @return an unmodifiable map in header order; empty if the header has none
     */
    public Map<String, String> metadata() {
        return metadata;
    }

    /**
     * Returns every tensor in the file.
     *
     * @return an unmodifiable list ordered by data offset
     */
    public List<TensorInfo> tensors() {
        return tensors;
    }

    /**
     * Looks up a tensor by name.
     *
     * @param name the tensor name
     * @return the entry, or empty if the file has no such tensor
     */
    public Optional<TensorInfo> find(String name) {
        return Optional.ofNullable(byName.get(name));
    }

    /**
     * Looks up a tensor that must exist.
     *
     * @param name the tensor name
     * @return the entry
     * @throws CheckpointException if the file has no such tensor
     */
    public TensorInfo get(String name) {
        TensorInfo t = byName.get(name);
        if (t == null) {
            throw new CheckpointException("missing tensor '" + name + "' in " + path);
        }
        return t;
    }

    /**
     * Reads a floating-point tensor into a new array, converting F16, BF16 and F64 to float.
     *
     * @param name the tensor name
     * @return the elements in row-major order
     * @throws CheckpointException   if the tensor is missing, not F32/F16/BF16/F64, too large for an
     *     array, or the file cannot be read or has shrunk since it was opened
     * @throws IllegalStateException if this file is closed
     */
    public float[] readFloats(String name) {
        TensorInfo t = floatTensor(name);
        long count = t.elementCount();
        if (count > MAX_ARRAY_LENGTH) {
            throw new CheckpointException("tensor '" + name + "' in " + path + " has " + count
                    + " elements, more than a Java array can hold");
        }
        float[] out = new float[(int) count];
        read(t, FloatBuffer.wrap(out));
        return out;
    }

    /**
     * Reads a floating-point tensor into {@code dst} at its position, converting F16, BF16 and F64 to
     * float, and advances the position by the element count. Data is streamed in chunks, so no temporary
     * copy of the whole tensor is made.
     *
     * @param name the tensor name
     * @param dst  the destination, with at least {@link TensorInfo#elementCount()} elements remaining
     * @throws CheckpointException      if the tensor is missing or not F32/F16/BF16/F64, or the file
     *     cannot be read or has shrunk since it was opened
     * @throws IllegalArgumentException if {@code dst} has too little room
     * @throws IllegalStateException    if this file is closed
     */
    public void readFloats(String name, FloatBuffer dst) {
        TensorInfo t = floatTensor(name);
        if (t.elementCount() > dst.remaining()) {
            throw new IllegalArgumentException("tensor '" + name + "' has " + t.elementCount()
                    + " elements but the buffer has room for " + dst.remaining());
        }
        read(t, dst);
    }

    private TensorInfo floatTensor(String name) {
        if (closed) {
            throw new IllegalStateException("safetensors file " + path + " is closed");
        }
        TensorInfo t = get(name);
        if (!FLOAT_DTYPES.contains(t.dtype())) {
            throw new CheckpointException("tensor '" + name + "' in " + path + " has dtype " + t.dtype()
                    + ", which cannot be read as float (supported: " + FLOAT_DTYPES + ")");
        }
        return t;
    }

    private void read(TensorInfo t, FloatBuffer dst) {
        if (chunk == null) {
            long largest = 0;
            for (TensorInfo info : tensors) largest = Math.max(largest, info.byteSize());
            chunk = ByteBuffer.allocateDirect(SafeTensors.chunkBytes(largest)).order(ByteOrder.LITTLE_ENDIAN);
        }
        long pos = dataStart + t.begin();
        long remaining = t.byteSize();
        try {
            while (remaining > 0) {
                int n = (int) Math.min(chunk.capacity(), remaining);
                chunk.clear().limit(n);
                readFully(path, channel, chunk, pos);
                chunk.flip();
                convert(t.dtype(), chunk, dst);
                pos += n;
                remaining -= n;
            }
        } catch (IOException e) {
            throw new CheckpointException("cannot read tensor '" + t.name() + "' from " + path + ": " + e, e);
        }
    }

    private static void convert(StoredDType dtype, ByteBuffer src, FloatBuffer dst) {
        switch (dtype) {
            case F32 -> dst.put(src.asFloatBuffer());
            case F16 -> {
                while (src.hasRemaining()) {
                    dst.put(SafeTensors.f16ToFloat(src.getShort()));
                }
            }
            case BF16 -> {
                while (src.hasRemaining()) {
                    dst.put(SafeTensors.bf16ToFloat(src.getShort()));
                }
            }
            case F64 -> {
                while (src.hasRemaining()) {
                    dst.put((float) src.getDouble());
                }
            }
            default -> throw new AssertionError("floatTensor admitted " + dtype);
        }
    }

    /** Fills {@code buf} from {@code pos}; a short file here means it shrank after validation. */
    private static void readFully(Path file, FileChannel ch, ByteBuffer buf, long pos) throws IOException {
        long p = pos;
        while (buf.hasRemaining()) {
            int r = ch.read(buf, p);
            if (r < 0) {
                throw corrupt(file, "unexpected end of file at byte " + p + " (truncated or modified while open?)");
            }
            p += r;
        }
    }

    /**
     * Closes the underlying channel; later reads throw {@link IllegalStateException}. Idempotent.
     *
     * @throws CheckpointException if closing the channel fails
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            channel.close();
        } catch (IOException e) {
            throw new CheckpointException("cannot close safetensors file " + path + ": " + e, e);
        }
    }

    private static void closeQuietly(FileChannel ch, Throwable cause) {
        try {
            ch.close();
        } catch (IOException e) {
            cause.addSuppressed(e);
        }
    }

    private static String prefix(Path file) {
        return "invalid safetensors file " + file + ": ";
    }

    private static CheckpointException corrupt(Path file, String problem) {
        return new CheckpointException(prefix(file) + problem);
    }
}
