package org.mamba4j.io;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Random;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.mamba4j.CheckpointException;

class SafeTensorsTest {

    @TempDir
    Path dir;

    // ---------------------------------------------------------------- round trips

    @Test
    void roundTripIsBitExactWithMetadataAlignedHeaderAndContiguousData() throws IOException {
        Random rnd = new Random(42);
        long[][] shapes = {{}, {7}, {3, 4, 5}, {0, 3}, {2, 1, 1, 3}};
        List<SafeTensors.Entry> entries = new ArrayList<>();
        for (int i = 0; i < shapes.length; i++) {
            int n = (int) Arrays.stream(shapes[i]).reduce(1, (a, b) -> a * b);
            entries.add(new SafeTensors.Entry("layer." + i + ".weight", shapes[i], randomFloats(rnd, n)));
        }
        Map<String, String> meta = new LinkedHashMap<>();
        meta.put("format", "pt");
        meta.put("mamba4j.d_model", "768");
        meta.put("unicode", "żółw \u2603");
        Path file = dir.resolve("model.safetensors");

        SafeTensors.write(file, meta, entries);

        long headerLength;
        try (FileChannel ch = FileChannel.open(file)) {
            ByteBuffer b = ByteBuffer.allocate(9).order(ByteOrder.LITTLE_ENDIAN);
            ch.read(b, 0);
            headerLength = b.flip().getLong();
            assertEquals('{', b.get());
        }
        assertEquals(0, headerLength % 8, "header length " + headerLength + " not a multiple of 8");

        try (SafeTensorsFile f = SafeTensorsFile.open(file)) {
            assertEquals(file, f.path());
            assertEquals(meta, f.metadata());
            assertEquals(List.copyOf(meta.keySet()), List.copyOf(f.metadata().keySet()));
            List<TensorInfo> infos = f.tensors();
            assertEquals(entries.size(), infos.size());
            long expectedBegin = 0;
            for (int i = 0; i < entries.size(); i++) {
                SafeTensors.Entry e = entries.get(i);
                TensorInfo t = infos.get(i);
                assertEquals(e.name(), t.name(), "tensors must come back in data-offset (= write) order");
                assertEquals(StoredDType.F32, t.dtype());
                assertArrayEquals(e.shape(), t.shape());
                assertEquals(expectedBegin, t.begin(), "data must be contiguous");
                assertEquals(4L * e.data().length, t.byteSize());
                expectedBegin = t.end();
                assertBitsEqual(e.data(), f.readFloats(e.name()));
                assertEquals(t, f.get(e.name()));
                assertEquals(t, f.find(e.name()).orElseThrow());
            }
            assertEquals(Files.size(file) - 8 - headerLength, expectedBegin, "data region must end at the last tensor");
            assertEquals(0, f.get("layer.0.weight").rank());
            assertEquals(1, f.get("layer.0.weight").elementCount());
            assertEquals(0, f.readFloats("layer.3.weight").length);
        }
    }

    @Test
    void specialValuesSurviveExactly() {
        float[] special = {0f, -0f, Float.NaN, Float.POSITIVE_INFINITY, Float.NEGATIVE_INFINITY,
            Float.MIN_VALUE, -Float.MIN_NORMAL, Float.MAX_VALUE, 1f / 3f};
        Path file = dir.resolve("special.safetensors");
        SafeTensors.write(file, Map.of(), List.of(new SafeTensors.Entry("s", new long[] {3, 3}, special)));
        try (SafeTensorsFile f = SafeTensorsFile.open(file)) {
            assertTrue(f.metadata().isEmpty());
            assertBitsEqual(special, f.readFloats("s"));
        }
    }

    @Test
    void emptyCheckpointRoundTrips() {
        Path file = dir.resolve("empty.safetensors");
        SafeTensors.write(file, Map.of(), List.of());
        try (SafeTensorsFile f = SafeTensorsFile.open(file)) {
            assertTrue(f.tensors().isEmpty());
            assertTrue(f.metadata().isEmpty());
        }
    }

    @Test
    void largeTensorIsStreamedInChunksIntoArraysAndBuffers() {
        Random rnd = new Random(7);
        // 2.8 MB: spans three 1 MiB read chunks, the last one partial
        float[] big = randomFloats(rnd, 700_001);
        float[] small = randomFloats(rnd, 5);
        Path file = dir.resolve("big.safetensors");
        SafeTensors.write(file, Map.of(), List.of(new SafeTensors.Entry("small", new long[] {5}, small),
                new SafeTensors.Entry("big", new long[] {big.length}, big)));
        try (SafeTensorsFile f = SafeTensorsFile.open(file)) {
            assertBitsEqual(big, f.readFloats("big"));

            // direct, native-order buffer with a non-zero position: data lands after it
            FloatBuffer dst = ByteBuffer.allocateDirect((big.length + 10) * 4).order(ByteOrder.nativeOrder())
                    .asFloatBuffer();
            dst.position(3);
            f.readFloats("big", dst);
            assertEquals(3 + big.length, dst.position());
            float[] back = new float[big.length];
            dst.position(3);
            dst.get(back);
            assertBitsEqual(big, back);

            // reading a small tensor after a big one reuses the chunk buffer without leftovers
            assertBitsEqual(small, f.readFloats("small"));

            FloatBuffer tooSmall = FloatBuffer.allocate(4);
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> f.readFloats("small", tooSmall));
            assertTrue(e.getMessage().contains("room for 4"), e.getMessage());
        }
    }

    // ---------------------------------------------------------------- other dtypes

    @Test
    void readsHandPickedF16AndBf16AndF64Values() throws IOException {
        short[] f16 = {0x3C00, (short) 0xC000, 0x0000, (short) 0x8000, 0x7C00, (short) 0xFC00, 0x0001,
            0x3555, 0x7BFF, 0x0400, 0x7E00};
        float[] f16Expected = {1f, -2f, 0f, -0f, Float.POSITIVE_INFINITY, Float.NEGATIVE_INFINITY,
            0x1p-24f, 0.333251953125f, 65504f, 0x1p-14f, Float.NaN};
        short[] bf16 = {0x3F80, (short) 0xC040, 0x4049, 0x7F80, (short) 0x8000, 0x0001};
        float[] bf16Expected = {1f, -3f, 3.140625f, Float.POSITIVE_INFINITY, -0f, 0x1p-133f};
        double[] f64 = {0.5, -1e300, 1.0 / 3.0};
        float[] f64Expected = {0.5f, Float.NEGATIVE_INFINITY, 1f / 3f};

        ByteBuffer data = ByteBuffer.allocate(22 + 12 + 24).order(ByteOrder.LITTLE_ENDIAN);
        for (short s : f16) {
            data.putShort(s);
        }
        for (short s : bf16) {
            data.putShort(s);
        }
        for (double d : f64) {
            data.putDouble(d);
        }
        // entries deliberately not in offset order; tensors() must sort them
        String json = "{\"d\":{\"dtype\":\"F64\",\"shape\":[3],\"data_offsets\":[34,58]},"
                + "\"h\":{\"dtype\":\"F16\",\"shape\":[11],\"data_offsets\":[0,22]},"
                + "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[22,34]}}";
        Path file = build("mixed.safetensors", json, data.array());

        try (SafeTensorsFile f = SafeTensorsFile.open(file)) {
            assertEquals(List.of("h", "b", "d"), f.tensors().stream().map(TensorInfo::name).toList());
            assertEquals(StoredDType.F16, f.get("h").dtype());
            assertArrayEquals(new long[] {2, 3}, f.get("b").shape());
            assertBitsEqual(f16Expected, f.readFloats("h"));
            assertBitsEqual(bf16Expected, f.readFloats("b"));
            assertBitsEqual(f64Expected, f.readFloats("d"));
        }
    }

    @Test
    void everyF16BitPatternMatchesAnIndependentReference() throws IOException {
        // 65536 patterns plus a tail so the tensor crosses a 1 MiB chunk boundary
        int n = 600_000;
        ByteBuffer data = ByteBuffer.allocate(2 * n).order(ByteOrder.LITTLE_ENDIAN);
        for (int i = 0; i < n; i++) {
            data.putShort((short) i);
        }
        Path file = build("f16.safetensors",
                "{\"all\":{\"dtype\":\"F16\",\"shape\":[" + n + "],\"data_offsets\":[0," + 2 * n + "]}}",
                data.array());
        try (SafeTensorsFile f = SafeTensorsFile.open(file)) {
            float[] got = f.readFloats("all");
            for (int i = 0; i < n; i++) {
                int bits = i & 0xFFFF;
                double ref = f16Reference(bits);
                if (Double.isNaN(ref)) {
                    assertTrue(Float.isNaN(got[i]), "pattern " + Integer.toHexString(bits));
                } else {
                    assertEquals(0, Float.compare((float) ref, got[i]), "pattern " + Integer.toHexString(bits));
                }
            }
        }
        for (int bits = 0; bits < 0x10000; bits++) {
            float bf = SafeTensors.bf16ToFloat((short) bits);
            assertEquals(bits << 16, Float.floatToRawIntBits(bf));
        }
    }

    @Test
    void nonFloatDtypeAndMissingTensorsAreReported() throws IOException {
        Path file = build("ints.safetensors",
                "{\"ids\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}", new byte[8]);
        try (SafeTensorsFile f = SafeTensorsFile.open(file)) {
            assertEquals(StoredDType.I32, f.get("ids").dtype());
            CheckpointException e = assertThrows(CheckpointException.class, () -> f.readFloats("ids"));
            assertTrue(e.getMessage().contains("I32") && e.getMessage().contains("cannot be read as float"),
                    e.getMessage());
            assertTrue(f.find("nope").isEmpty());
            CheckpointException m = assertThrows(CheckpointException.class, () -> f.get("nope"));
            assertEquals("missing tensor 'nope' in " + file, m.getMessage());
            assertThrows(CheckpointException.class, () -> f.readFloats("nope"));
        }
    }

    @Test
    void closedFileRefusesReadsAndFileShrunkAfterOpenIsReported() throws IOException {
        Path file = dir.resolve("c.safetensors");
        SafeTensors.write(file, Map.of(), List.of(new SafeTensors.Entry("x", new long[] {4}, new float[4])));
        SafeTensorsFile f = SafeTensorsFile.open(file);
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.WRITE)) {
            ch.truncate(Files.size(file) - 4);
        }
        CheckpointException e = assertThrows(CheckpointException.class, () -> f.readFloats("x"));
        assertTrue(e.getMessage().contains("unexpected end of file"), e.getMessage());
        f.close();
        f.close();
        assertThrows(IllegalStateException.class, () -> f.readFloats("x"));
    }

    // ---------------------------------------------------------------- corrupt and hostile files

    @Test
    void truncatedDataIsRejected() throws IOException {
        Path file = validFile("cut-data.safetensors");
        truncate(file, Files.size(file) - 4);
        assertRejected(file, "beyond the data region");
    }

    @Test
    void truncatedHeaderIsRejected() throws IOException {
        Path file = validFile("cut-header.safetensors");
        truncate(file, 8 + headerLength(file) / 2);
        assertRejected(file, "truncated");
    }

    @Test
    void tooShortFilesAreRejected() throws IOException {
        Path seven = dir.resolve("seven.safetensors");
        Files.write(seven, new byte[] {1, 2, 3, 4, 5, 6, 7});
        assertRejected(seven, "too short", "7 bytes");
        Path empty = dir.resolve("zero.safetensors");
        Files.write(empty, new byte[0]);
        assertRejected(empty, "too short");
    }

    @Test
    void absurdHeaderLengthsAreRejected() throws IOException {
        assertRejected(withPrefix("p62.safetensors", 1L << 62, new byte[64]), "absurd header length",
                Long.toString(1L << 62));
        // read as unsigned: all ones is 2^64 - 1, not -1
        assertRejected(withPrefix("ones.safetensors", 0xFFFF_FFFF_FFFF_FFFFL, new byte[64]),
                "absurd header length", "18446744073709551615");
        assertRejected(withPrefix("over.safetensors", SafeTensors.MAX_HEADER_BYTES + 1, new byte[64]),
                "absurd header length");
        assertRejected(withPrefix("zero-len.safetensors", 0, new byte[64]), "empty header");
    }

    @Test
    void headerLengthBeyondFileSizeIsRejected() throws IOException {
        assertRejected(withPrefix("beyond.safetensors", 1000, "{}      ".getBytes(StandardCharsets.US_ASCII)),
                "exceeds");
    }

    @Test
    void malformedJsonIsRejected() throws IOException {
        assertRejected(build("bad-json.safetensors", "{\"a\": {\"dtype\": \"F32\",", new byte[0]), "JSON");
        assertRejected(build("array.safetensors", "[1, 2, 3]", new byte[0]), "must be a JSON object", "ARRAY");
        assertRejected(build("blank.safetensors", "        ", new byte[0]), "must be a JSON object");
        assertRejected(build("trailing.safetensors", "{} {}", new byte[0]), "JSON");
        assertRejected(withPrefix("utf8.safetensors", 4, new byte[] {'{', (byte) 0xFF, (byte) 0xFE, '}'}), "UTF-8");
        assertRejected(build("deep.safetensors", "[".repeat(100_000), new byte[0]), "JSON");
    }

    @Test
    void malformedEntriesAreRejected() throws IOException {
        assertRejected(json("not-obj", "{\"a\": 5}", 0), "tensor 'a'", "must be a JSON object");
        assertRejected(json("no-dtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4), "dtype");
        assertRejected(json("num-dtype", "{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4), "dtype");
        assertRejected(json("no-shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4), "shape");
        assertRejected(json("str-shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}", 4),
                "shape");
        assertRejected(json("frac-dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4),
                "must be an integer");
        assertRejected(json("huge-dim",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}", 4),
                "must be an integer");
        assertRejected(json("no-offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4), "data_offsets");
        assertRejected(json("one-offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", 4),
                "data_offsets");
        assertRejected(json("neg-offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4),
                "negative");
        assertRejected(json("extra", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}",
                4), "unexpected field 'x'");
        assertRejected(json("empty-name", "{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
                "name is empty");
        assertRejected(json("rank9", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                + "\"data_offsets\":[0,4]}}", 4), "9 dims");
    }

    @Test
    void unknownDtypeIsRejected() throws IOException {
        assertRejected(json("dtype", "{\"a\":{\"dtype\":\"F128\",\"shape\":[1],\"data_offsets\":[0,16]}}", 16),
                "unknown dtype 'F128'");
        // spelling is case-sensitive, as in the format
        assertRejected(json("lower", "{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
                "unknown dtype");
    }

    @Test
    void negativeDimAndShapeOverflowAreRejected() throws IOException {
        assertRejected(json("neg-dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1,-4],\"data_offsets\":[0,16]}}", 16),
                "negative");
        assertRejected(json("overflow", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
                + "\"data_offsets\":[0,4]}}", 4), "overflow");
        // element count fits, byte count (2^61 * 4) does not
        assertRejected(json("byte-overflow", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2305843009213693952],"
                + "\"data_offsets\":[0,4]}}", 4), "overflow");
    }

    @Test
    void badOffsetsAreRejected() throws IOException {
        assertRejected(json("past-end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4),
                "beyond the data region");
        assertRejected(json("begin-after-end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}",
                8), "begin 8 is after end 4");
        assertRejected(json("mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", 16),
                "size mismatch", "needs 16");
        assertRejected(json("overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                + "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12), "overlap", "'a'", "'b'");
        assertRejected(json("same-range", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                + "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8), "overlap");
    }

    @Test
    void duplicateKeysAreRejected() throws IOException {
        assertRejected(json("dup", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                + "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8), "duplicate");
        assertRejected(json("dup-meta", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0), "duplicate");
    }

    @Test
    void nonStringMetadataIsRejected() throws IOException {
        assertRejected(json("meta-num", "{\"__metadata__\":{\"epoch\":3}}", 0), "metadata", "'epoch'", "string");
        assertRejected(json("meta-arr", "{\"__metadata__\":[\"x\"]}", 0), "__metadata__", "object");
    }

    @Test
    void missingFileAndDirectoryAreRejected() {
        Path missing = dir.resolve("nope.safetensors");
        CheckpointException e = assertThrows(CheckpointException.class, () -> SafeTensorsFile.open(missing));
        assertTrue(e.getMessage().contains("not found") && e.getMessage().contains(missing.toString()),
                e.getMessage());
        CheckpointException d = assertThrows(CheckpointException.class, () -> SafeTensorsFile.open(dir));
        assertTrue(d.getMessage().contains("directory"), d.getMessage());
    }

    @Test
    void randomGarbageIsRejected() throws IOException {
        Random rnd = new Random(1234);
        byte[] garbage = new byte[4096];
        rnd.nextBytes(garbage);
        Path file = dir.resolve("garbage.safetensors");
        Files.write(file, garbage);
        assertRejected(file);

        // many garbage files whose length prefix is plausible, so the parser sees the bytes
        for (int i = 0; i < 300; i++) {
            byte[] body = new byte[1 + rnd.nextInt(4096)];
            rnd.nextBytes(body);
            if (i % 2 == 0) {
                // printable ASCII gets past UTF-8 decoding into the JSON parser
                for (int j = 0; j < body.length; j++) {
                    body[j] = (byte) (' ' + rnd.nextInt(95));
                }
            }
            assertRejected(withPrefix("g" + i + ".safetensors", 1 + rnd.nextInt(body.length), body));
        }
    }

    @Test
    void hugeButValidLengthGarbageHeaderIsRejected() throws IOException {
        Random rnd = new Random(99);
        byte[] binary = new byte[16 << 20];
        rnd.nextBytes(binary);
        assertRejected(withPrefix("huge-bin.safetensors", binary.length, binary), "UTF-8");

        byte[] text = new byte[16 << 20];
        for (int j = 0; j < text.length; j++) {
            text[j] = (byte) ('!' + rnd.nextInt(94));
        }
        text[0] = '{';
        assertRejected(withPrefix("huge-text.safetensors", text.length, text), "JSON");
    }

    @Test
    void mutatedValidFilesFailOnlyWithCheckpointException() throws IOException {
        Path valid = validFile("base.safetensors");
        byte[] original = Files.readAllBytes(valid);
        int headerEnd = (int) (8 + headerLength(valid));
        Random rnd = new Random(2024);
        Path file = dir.resolve("mutant.safetensors");
        int opened = 0;
        for (int i = 0; i < 2000; i++) {
            byte[] bytes = original.clone();
            for (int k = 1 + rnd.nextInt(3); k > 0; k--) {
                // mostly hit the header, where the interesting structure is
                bytes[rnd.nextInt(rnd.nextBoolean() ? headerEnd : bytes.length)] = (byte) rnd.nextInt(256);
            }
            Files.write(file, bytes);
            try (SafeTensorsFile f = SafeTensorsFile.open(file)) {
                opened++;
                for (TensorInfo t : f.tensors()) {
                    try {
                        assertEquals(t.elementCount(), f.readFloats(t.name()).length);
                    } catch (CheckpointException expected) {
                        assertTrue(expected.getMessage().contains("cannot be read as float"), expected.getMessage());
                    }
                }
            } catch (CheckpointException expected) {
                assertTrue(expected.getMessage().contains(file.toString()), expected.getMessage());
            }
        }
        assertTrue(opened > 0 && opened < 2000, "mutations should both break and spare files, opened " + opened);
    }

    // ---------------------------------------------------------------- atomic writes

    @Test
    void writingOverAnExistingFileReplacesIt() {
        Path file = dir.resolve("m.safetensors");
        SafeTensors.write(file, Map.of("v", "1"), List.of(new SafeTensors.Entry("old", new long[] {2}, new float[] {1, 2})));
        SafeTensors.write(file, Map.of("v", "2"), List.of(new SafeTensors.Entry("new", new long[] {1}, new float[] {9})));
        try (SafeTensorsFile f = SafeTensorsFile.open(file)) {
            assertEquals(Map.of("v", "2"), f.metadata());
            assertEquals(List.of("new"), f.tensors().stream().map(TensorInfo::name).toList());
            assertArrayEquals(new float[] {9}, f.readFloats("new"));
        }
        assertEquals(List.of("m.safetensors"), listDir());
    }

    @Test
    void failedWriteLeavesOldFileUntouchedAndNoTempFile() throws IOException {
        Path file = dir.resolve("m.safetensors");
        SafeTensors.Entry good = new SafeTensors.Entry("a", new long[] {2}, new float[] {1, 2});
        SafeTensors.write(file, Map.of("v", "1"), List.of(good));
        byte[] before = Files.readAllBytes(file);

        IllegalArgumentException shape = assertThrows(IllegalArgumentException.class, () -> SafeTensors.write(file,
                Map.of("v", "2"), List.of(good, new SafeTensors.Entry("bad", new long[] {2, 3}, new float[5]))));
        assertTrue(shape.getMessage().contains("6 elements but data has 5"), shape.getMessage());
        IllegalArgumentException dup = assertThrows(IllegalArgumentException.class,
                () -> SafeTensors.write(file, Map.of(), List.of(good, good)));
        assertTrue(dup.getMessage().contains("duplicate tensor name 'a'"), dup.getMessage());

        assertArrayEquals(before, Files.readAllBytes(file));
        assertEquals(List.of("m.safetensors"), listDir());
    }

    @Test
    void failedMoveDeletesTheTempFile() throws IOException {
        // a non-empty directory cannot be replaced by a file, so the final rename fails after the data was written
        Path target = dir.resolve("occupied");
        Files.createDirectory(target);
        Files.write(target.resolve("keep.txt"), new byte[] {1});
        CheckpointException e = assertThrows(CheckpointException.class, () -> SafeTensors.write(target, Map.of(),
                List.of(new SafeTensors.Entry("a", new long[] {1000}, new float[1000]))));
        assertTrue(e.getMessage().contains("cannot write") && e.getMessage().contains(target.toString()),
                e.getMessage());
        assertEquals(List.of("occupied"), listDir());
        assertArrayEquals(new byte[] {1}, Files.readAllBytes(target.resolve("keep.txt")));
    }

    @Test
    void invalidEntriesAreRefusedAtConstruction() {
        float[] one = {1};
        assertThrows(IllegalArgumentException.class, () -> new SafeTensors.Entry("", new long[] {1}, one));
        assertThrows(IllegalArgumentException.class, () -> new SafeTensors.Entry("__metadata__", new long[] {1}, one));
        assertThrows(IllegalArgumentException.class, () -> new SafeTensors.Entry("a", new long[] {-1, -1}, one));
        assertThrows(IllegalArgumentException.class, () -> new SafeTensors.Entry("a", new long[9], new float[0]));
        assertThrows(IllegalArgumentException.class, () -> new SafeTensors.Entry("a", new long[] {2}, one));
        assertThrows(IllegalArgumentException.class,
                () -> new SafeTensors.Entry("a", new long[] {1L << 62, 4}, one));
        long[] shape = {1};
        SafeTensors.Entry e = new SafeTensors.Entry("a", shape, one);
        shape[0] = 5;
        assertArrayEquals(new long[] {1}, e.shape(), "shape must be copied");
    }

    // ---------------------------------------------------------------- helpers

    /** Reference F16 decoding straight from the IEEE 754 definition, independent of the library's bit tricks. */
    private static double f16Reference(int bits) {
        double sign = (bits & 0x8000) == 0 ? 1 : -1;
        int exponent = (bits >>> 10) & 0x1F;
        int mantissa = bits & 0x3FF;
        if (exponent == 0x1F) {
            return mantissa == 0 ? sign * Double.POSITIVE_INFINITY : Double.NaN;
        }
        if (exponent == 0) {
            return sign * mantissa * Math.pow(2, -24);
        }
        return sign * (1 + mantissa / 1024.0) * Math.pow(2, exponent - 15);
    }

    /** Random floats over the whole bit space except NaN, whose payload a JVM may canonicalise. */
    private static float[] randomFloats(Random rnd, int n) {
        float[] a = new float[n];
        for (int i = 0; i < n; i++) {
            float v;
            do {
                v = Float.intBitsToFloat(rnd.nextInt());
            } while (Float.isNaN(v));
            a[i] = v;
        }
        return a;
    }

    private static void assertBitsEqual(float[] expected, float[] actual) {
        assertEquals(expected.length, actual.length, "length");
        for (int i = 0; i < expected.length; i++) {
            if (Float.isNaN(expected[i])) {
                assertTrue(Float.isNaN(actual[i]), "element " + i + " should be NaN");
            } else {
                assertEquals(Float.floatToRawIntBits(expected[i]), Float.floatToRawIntBits(actual[i]),
                        "element " + i + ": expected " + expected[i] + " got " + actual[i]);
            }
        }
    }

    /** Asserts that opening fails with a CheckpointException naming the file and containing every word. */
    private static void assertRejected(Path file, String... words) {
        CheckpointException e = assertThrows(CheckpointException.class, () -> {
            try (SafeTensorsFile f = SafeTensorsFile.open(file)) {
                fail("opened a bad file: " + f.tensors());
            }
        });
        String msg = e.getMessage();
        assertTrue(msg.contains(file.toString()), "message should name the file: " + msg);
        for (String w : words) {
            assertTrue(msg.toLowerCase(Locale.ROOT).contains(w.toLowerCase(Locale.ROOT)),
                    "message should mention '" + w + "': " + msg);
        }
    }

    private Path validFile(String name) {
        Path file = dir.resolve(name);
        SafeTensors.write(file, Map.of("k", "v"), List.of(
                new SafeTensors.Entry("a", new long[] {2, 3}, new float[] {1, 2, 3, 4, 5, 6}),
                new SafeTensors.Entry("b", new long[] {}, new float[] {7})));
        return file;
    }

    /** A file with the given JSON header (length prefix = its byte length) and {@code dataBytes} zero bytes. */
    private Path json(String name, String header, int dataBytes) throws IOException {
        return build(name + ".safetensors", header, new byte[dataBytes]);
    }

    private Path build(String name, String header, byte[] data) throws IOException {
        byte[] h = header.getBytes(StandardCharsets.UTF_8);
        return withPrefix(name, h.length, concat(h, data));
    }

    /** A file made of an arbitrary 8-byte little-endian length prefix followed by {@code rest}. */
    private Path withPrefix(String name, long prefix, byte[] rest) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(8 + rest.length).order(ByteOrder.LITTLE_ENDIAN);
        b.putLong(prefix).put(rest);
        Path file = dir.resolve(name);
        Files.write(file, b.array());
        return file;
    }

    private static byte[] concat(byte[] a, byte[] b) {
        byte[] out = Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }

    private static long headerLength(Path file) throws IOException {
        byte[] prefix = Arrays.copyOf(Files.readAllBytes(file), 8);
        return ByteBuffer.wrap(prefix).order(ByteOrder.LITTLE_ENDIAN).getLong();
    }

    private static void truncate(Path file, long size) throws IOException {
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.WRITE)) {
            ch.truncate(size);
        }
    }

    private List<String> listDir() {
        try (Stream<Path> s = Files.list(dir)) {
            return s.map(p -> p.getFileName().toString()).sorted().collect(Collectors.toList());
        } catch (IOException e) {
            throw new AssertionError(e);
        }
    }
}
