package org.mamba4j.io;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.channels.OverlappingFileLockException;
import java.nio.file.DirectoryIteratorException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ThreadLocalRandom;
import org.mamba4j.CheckpointException;

/**
 * Writes safetensors files and holds the format's constants and number conversions.
 *
 * <p>Writes are atomic: the file is streamed to a temporary sibling, forced to disk and renamed over the
 * destination, and the directory is forced too, so a reader sees either the old file or the complete new one,
 * never a partial write — also after the writing process is killed or the machine loses power. A process killed
 * mid-write leaves its temporary file ({@code <name>.tmp-<hex>}) behind; the next write of the same file deletes
 * such leftovers. A writer holds a lock on its temporary file while it exists, so a leftover is told from a
 * write in progress elsewhere: only unlocked ones are deleted. Use {@link SafeTensorsFile#open(Path)} to read.
 */
public final class SafeTensors {

    /** Key of the optional string-to-string metadata object in a header; never a tensor name. */
    public static final String METADATA_KEY = "__metadata__";

    /** Largest header this library writes or accepts, so a hostile length cannot exhaust memory. */
    public static final long MAX_HEADER_BYTES = 100L << 20;

    /** Most dimensions a tensor may have. */
    public static final int MAX_RANK = 8;

    /** Chunk size for streaming tensor data; a multiple of 8 so no element straddles two chunks. */
    static final int CHUNK_BYTES = 1 << 20;

    private static final ObjectMapper MAPPER = JsonMapper.builder().build();

    private SafeTensors() {
    }

    /**
     * A tensor to write: a name, a shape and row-major float data, stored as little-endian F32.
     *
     * <p>The shape is copied; the data array is not (tensors can be large), so it must not change until
     * {@link #write} returns.
     *
     * @param name  non-empty tensor name, not {@value #METADATA_KEY}
     * @param shape dimensions, each {@code >= 0}, at most {@value #MAX_RANK}; empty for a scalar
     * @param data  the elements; its length must equal the product of the dimensions
     */
    public record Entry(String name, long[] shape, float[] data) {

        /**
         * Validates the entry.
         *
         * @throws IllegalArgumentException if the name is empty or reserved, the shape has too many or
         *     negative dimensions, or its product differs from {@code data.length}
         */
        public Entry {
            Objects.requireNonNull(name, "name");
            Objects.requireNonNull(data, "data");
            shape = Objects.requireNonNull(shape, "shape").clone();
            if (name.isEmpty() || name.equals(METADATA_KEY)) {
                throw new IllegalArgumentException("invalid tensor name '" + name + "'");
            }
            if (shape.length > MAX_RANK) {
                throw new IllegalArgumentException("tensor '" + name + "' has " + shape.length
                        + " dimensions, at most " + MAX_RANK + " are allowed");
            }
            long count = 1;
            for (long d : shape) {
                if (d < 0) {
                    throw new IllegalArgumentException("tensor '" + name + "' has negative dimension " + d);
                }
                try {
                    count = Math.multiplyExact(count, d);
                } catch (ArithmeticException e) {
                    throw new IllegalArgumentException("tensor '" + name + "' shape overflows", e);
                }
            }
            if (count != data.length) {
                throw new IllegalArgumentException("tensor '" + name + "' shape " + Arrays.toString(shape)
                        + " has " + count + " elements but data has " + data.length);
            }
        }

        /**
         * Returns a copy of the dimensions.
         *
         * @return the shape; empty for a scalar
         */
        @Override
        public long[] shape() {
            return shape.clone();
        }
    }

    /**
     * Atomically writes tensors and metadata to a safetensors file, replacing any existing file.
     *
     * <p>Tensors are laid out contiguously in list order. The header is padded with spaces so the data
     * region starts on an 8-byte boundary. On any failure the temporary file is deleted and the
     * destination is left as it was.
     *
     * @param file     destination path; its directory must exist
     * @param metadata string metadata stored under {@value #METADATA_KEY}; omitted from the file if empty
     * @param tensors  tensors to store, names unique
     * @throws IllegalArgumentException if names repeat or the header would exceed {@link #MAX_HEADER_BYTES}
     * @throws NullPointerException     if an argument, metadata key or value, or entry is null
     * @throws CheckpointException      if the file cannot be written or moved into place
     */
    public static void write(Path file, Map<String, String> metadata, List<Entry> tensors) {
        Objects.requireNonNull(file, "file");
        Objects.requireNonNull(metadata, "metadata");
        Objects.requireNonNull(tensors, "tensors");
        byte[] header = header(metadata, tensors);

        Path target = file.toAbsolutePath();
        deleteLeftovers(target);
        Path tmp = target.resolveSibling(target.getFileName() + TEMP_INFIX
                + Long.toHexString(ThreadLocalRandom.current().nextLong()));
        boolean moved = false;
        WRITING.add(tmp);
        try {
            // CREATE_NEW so a leftover or concurrent temp file is never silently reused.
            try (FileChannel ch = FileChannel.open(tmp, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE);
                 FileLock inUse = ch.lock()) {  // tells deleteLeftovers of other writers that this one is alive
                ByteBuffer buf = ByteBuffer.allocateDirect(chunkBytes(largest(tensors))).order(ByteOrder.LITTLE_ENDIAN);
                buf.putLong(header.length).flip();
                writeFully(ch, buf);
                writeFully(ch, ByteBuffer.wrap(header));
                int floatsPerChunk = CHUNK_BYTES / Float.BYTES;
                for (Entry e : tensors) {
                    float[] data = e.data();
                    for (int off = 0; off < data.length; off += floatsPerChunk) {
                        int n = Math.min(floatsPerChunk, data.length - off);
                        buf.clear();
                        buf.asFloatBuffer().put(data, off, n);
                        buf.limit(n * Float.BYTES);
                        writeFully(ch, buf);
                    }
                }
                ch.force(true);
                // renamed while still locked, so no other writer's clean-up can take it for a leftover
                Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
                moved = true;
            }
        } catch (IOException e) {
            throw new CheckpointException("cannot write safetensors file " + file + ": " + e, e);
        } finally {
            if (!moved) {
                deleteTemp(tmp);
            }
            WRITING.remove(tmp);
        }
        syncDirectory(target.getParent());
    }

    /**
     * Converts an IEEE 754 half-precision value to float; exact for every input, including subnormals,
     * infinities and NaN (the payload is kept).
     *
     * @param bits the 16 bits of an F16 value
     * @return the same value as a float
     */
    public static float f16ToFloat(short bits) {
        int h = bits & 0xFFFF;
        int sign = (h & 0x8000) << 16;
        int exponent = (h >>> 10) & 0x1F;
        int mantissa = h & 0x3FF;
        if (exponent == 0x1F) {
            return Float.intBitsToFloat(sign | 0x7F80_0000 | (mantissa << 13));
        }
        if (exponent == 0) {
            // zero or subnormal: mantissa * 2^-24, exact in float because mantissa < 2^10
            float v = mantissa * 0x1p-24f;
            return sign != 0 ? -v : v;
        }
        // rebias the exponent from 15 to 127
        return Float.intBitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
    }

    /**
     * Converts a bfloat16 value to float; exact, since bfloat16 is the upper half of a float.
     *
     * @param bits the 16 bits of a BF16 value
     * @return the same value as a float
     */
    public static float bf16ToFloat(short bits) {
        return Float.intBitsToFloat((bits & 0xFFFF) << 16);
    }

    /** Builds the space-padded JSON header, validating names and metadata on the way. */
    private static byte[] header(Map<String, String> metadata, List<Entry> tensors) {
        ObjectNode root = MAPPER.createObjectNode();
        if (!metadata.isEmpty()) {
            ObjectNode meta = root.putObject(METADATA_KEY);
            metadata.forEach((k, v) -> meta.put(Objects.requireNonNull(k, "metadata key"),
                    Objects.requireNonNull(v, () -> "metadata value of '" + k + "'")));
        }
        Set<String> names = new HashSet<>();
        long offset = 0;
        for (Entry e : tensors) {
            Objects.requireNonNull(e, "tensor entry");
            if (!names.add(e.name())) {
                throw new IllegalArgumentException("duplicate tensor name '" + e.name() + "'");
            }
            long end = offset + (long) e.data().length * Float.BYTES;
            ObjectNode t = root.putObject(e.name());
            t.put("dtype", StoredDType.F32.safetensorsName());
            ArrayNode shape = t.putArray("shape");
            for (long d : e.shape()) {
                shape.add(d);
            }
            t.putArray("data_offsets").add(offset).add(end);
            offset = end;
        }
        byte[] json;
        try {
            json = MAPPER.writeValueAsBytes(root);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException("cannot serialise a JSON tree", e);
        }
        // round up to a multiple of 8 so the data region is 8-byte aligned (the length prefix is 8 bytes)
        long padded = ((long) json.length + 7) & ~7L;
        if (padded > MAX_HEADER_BYTES) {
            throw new IllegalArgumentException("safetensors header would be " + padded
                    + " bytes, more than the limit of " + MAX_HEADER_BYTES);
        }
        byte[] header = Arrays.copyOf(json, (int) padded);
        Arrays.fill(header, json.length, header.length, (byte) ' ');
        return header;
    }

    private static void writeFully(FileChannel ch, ByteBuffer buf) throws IOException {
        while (buf.hasRemaining()) {
            ch.write(buf);
        }
    }

    /**
     * A streaming buffer for tensors of at most {@code largestBytes}: {@link #CHUNK_BYTES}, or less for small files.
     * Direct memory is freed only by a garbage collection, and allocating 1 MiB per small file made the JVM
     * stall in {@code System.gc()} once the direct-memory limit was reached (3-6 ms per tiny file).
     */
    static int chunkBytes(long largestBytes) {
        return (int) Math.max(8, Math.min(CHUNK_BYTES, (largestBytes + 7) & ~7L));
    }

    private static long largest(List<Entry> tensors) {
        long most = 0;
        for (Entry e : tensors) most = Math.max(most, (long) e.data().length * Float.BYTES);
        return most;
    }

    /** Infix of temporary files: {@code <name>.tmp-<hex>}. */
    static final String TEMP_INFIX = ".tmp-";

    /**
     * Temp files being written by this JVM. The clean-up never opens these: closing any channel of a file drops
     * every lock this process holds on it (POSIX), which would unlock a live writer for other processes.
     */
    private static final Set<Path> WRITING = ConcurrentHashMap.newKeySet();

    /**
     * Deletes the temporary files that killed writers of {@code target} left behind: siblings named
     * {@code <name>.tmp-<hex>} that nobody holds locked. Best effort: a file it cannot lock or delete stays.
     */
    private static void deleteLeftovers(Path target) {
        Path dir = target.getParent();
        String prefix = target.getFileName() + TEMP_INFIX;
        try (DirectoryStream<Path> temps = Files.newDirectoryStream(dir, p -> isTempOf(prefix, p.getFileName().toString()))) {
            for (Path t : temps) {
                if (WRITING.contains(t)) continue;
                try (FileChannel ch = FileChannel.open(t, StandardOpenOption.WRITE); FileLock free = ch.tryLock()) {
                    if (free != null) Files.deleteIfExists(t);  // locked elsewhere: a write in progress in another process
                } catch (OverlappingFileLockException | IOException inUse) {
                    // a write in progress in this JVM, or a file that vanished or cannot be opened: leave it
                }
            }
        } catch (IOException | DirectoryIteratorException ignored) {
            // an unreadable directory: the write itself will report what is wrong
        }
    }

    private static boolean isTempOf(String prefix, String name) {
        if (!name.startsWith(prefix) || name.length() == prefix.length() || name.length() > prefix.length() + 16) return false;
        for (int i = prefix.length(); i < name.length(); i++)
            if (Character.digit(name.charAt(i), 16) < 0) return false;
        return true;
    }

    private static void deleteTemp(Path tmp) {
        try {
            Files.deleteIfExists(tmp);
        } catch (IOException ignored) {
            // the original failure is what the caller needs to see; a stray temp file is harmless
        }
    }

    /** Forces the directory entry so the rename survives a crash; some platforms cannot open directories. */
    private static void syncDirectory(Path dir) {
        try (FileChannel ch = FileChannel.open(dir, StandardOpenOption.READ)) {
            ch.force(true);
        } catch (IOException ignored) {
            // best effort: the file contents are already durable, only the rename might be lost on a crash
        }
    }
}
