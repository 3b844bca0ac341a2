package org.mamba4j;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.TreeMap;
import java.util.zip.CRC32C;
import org.mamba4j.io.SafeTensorsFile;
import org.mamba4j.io.StoredDType;
import org.mamba4j.io.TensorInfo;

/**
 * The integrity check of mamba4j's own files (model checkpoints, optimiser states, heads): a CRC-32C over the
 * metadata and every tensor, stored in the metadata under {@value #KEY} as {@code crc32c:xxxxxxxx}.
 *
 * <p>It covers what the file means, not how its JSON is spelled: each metadata entry but the checksum (sorted by
 * key), then each tensor (sorted by name) with its name, dtype, shape and data. So a bit flip anywhere in the
 * metadata or the data is caught (a CRC detects every single-bit error), while a tool that rewrites the header
 * with the same content still verifies. It detects accidents (bad disks, bad copies, bit rot), not tampering:
 * anyone who can change a file can recompute it.
 */
final class CheckpointChecksum {
    /** The metadata key. */
    static final String KEY = "checksum";
    private static final String PREFIX = "crc32c:";

    private CheckpointChecksum() {}

    /** The value to store for this metadata (any {@value #KEY} entry is ignored) and these F32 tensors. */
    static String of(Map<String, String> metadata, Map<String, long[]> shapes, Map<String, float[]> data) {
        CRC32C crc = new CRC32C();
        header(crc, metadata);
        ByteBuffer chunk = chunk(data.values());
        for (String name : new TreeMap<>(data).keySet()) tensor(crc, chunk, name, StoredDType.F32, shapes.get(name), data.get(name));
        return String.format("%s%08x", PREFIX, crc.getValue());
    }

    /**
     * Checks a file against its stored checksum, given every tensor's values as read ({@code values} must hold
     * every tensor of the file).
     *
     * @param required whether the file's format version promises a checksum (then a missing one is corruption)
     * @throws CheckpointException if the checksum is malformed, missing though required, or does not match
     */
    static void verify(SafeTensorsFile f, Map<String, float[]> values, boolean required) {
        String stored = f.metadata().get(KEY);
        String where = f.path().toString();
        if (stored == null) {
            if (required) throw new CheckpointException(where + ": the metadata has no '" + KEY + "' though its format version has one: the file is corrupt");
            return;  // an older file: nothing to check
        }
        if (!stored.matches("crc32c:[0-9a-f]{8}"))
            throw new CheckpointException(where + ": malformed checksum '" + stored + "': the file is corrupt");
        CRC32C crc = new CRC32C();
        header(crc, f.metadata());
        ByteBuffer chunk = chunk(values.values());
        for (TensorInfo t : new TreeMap<>(byName(f)).values()) {
            float[] v = values.get(t.name());
            if (v == null) throw new IllegalStateException("tensor '" + t.name() + "' was not read");
            tensor(crc, chunk, t.name(), t.dtype(), t.shape(), v);
        }
        String actual = String.format("%s%08x", PREFIX, crc.getValue());
        if (!actual.equals(stored))
            throw new CheckpointException(where + ": checksum mismatch (stored " + stored + ", computed " + actual
                    + "): the file is corrupt");
    }

    private static Map<String, TensorInfo> byName(SafeTensorsFile f) {
        Map<String, TensorInfo> m = new TreeMap<>();
        for (TensorInfo t : f.tensors()) m.put(t.name(), t);
        return m;
    }

    private static void header(CRC32C crc, Map<String, String> metadata) {
        for (Map.Entry<String, String> e : new TreeMap<>(metadata).entrySet()) {
            if (e.getKey().equals(KEY)) continue;
            string(crc, e.getKey());
            string(crc, e.getValue());
        }
    }

    /** One conversion buffer for a whole file: no larger than its largest tensor, at most 64 KiB. */
    private static ByteBuffer chunk(Iterable<float[]> tensors) {
        int most = 1;
        for (float[] v : tensors) most = Math.max(most, Math.min(v.length, 16 << 10));
        return ByteBuffer.allocate(4 * most).order(ByteOrder.LITTLE_ENDIAN);
    }

    private static void tensor(CRC32C crc, ByteBuffer chunk, String name, StoredDType dtype, long[] shape, float[] v) {
        string(crc, name);
        string(crc, dtype.safetensorsName());
        ByteBuffer b = ByteBuffer.allocate(8 * (shape.length + 1)).order(ByteOrder.LITTLE_ENDIAN);
        b.putLong(shape.length);
        for (long d : shape) b.putLong(d);
        crc.update(b.flip());
        // the values as F32 little-endian: exactly the bytes of an F32 tensor, which is what mamba4j writes
        for (int off = 0; off < v.length; off += chunk.capacity() / 4) {
            int n = Math.min(chunk.capacity() / 4, v.length - off);
            chunk.clear();
            chunk.asFloatBuffer().put(v, off, n);
            chunk.limit(n * 4);
            crc.update(chunk);
        }
    }

    /** Length-prefixed, so that no two different sequences of strings feed the same bytes. */
    private static void string(CRC32C crc, String s) {
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        crc.update(ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt(b.length).flip());
        crc.update(b);
    }
}
