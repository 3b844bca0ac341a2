package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.function.Consumer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.mamba4j.io.SafeTensors;
import org.mamba4j.io.SafeTensorsFile;

/**
 * The checksum of mamba4j files: every single-bit flip in a checkpoint's header (its metadata, tensor table and
 * padding) either is rejected or loads exactly the saved model — never a model that differs, such as norm_eps
 * turned from 1e-5 into 0.1, which loaded silently before the checksum — and every flip in the tensor data is
 * rejected. Files without a checksum (format version 1) still load; a version-2 file that lost it does not.
 */
class CheckpointIntegrityTest {
    @TempDir Path tmp;
    private Path dir;

    /** Thousands of rewrites of one small file: in memory where possible (a rewrite on ext4 waits ~2 ms for the disk). */
    @BeforeEach
    void scratch() throws Exception {
        Path shm = Path.of("/dev/shm");
        dir = Files.isDirectory(shm) && Files.isWritable(shm) ? Files.createTempDirectory(shm, "mamba4j-flips") : tmp;
    }

    @AfterEach
    void cleanUp() throws Exception {
        if (dir.equals(tmp)) return;
        try (var files = Files.list(dir)) {
            for (Path p : (Iterable<Path>) files::iterator) Files.delete(p);
        }
        Files.delete(dir);
    }

    private static MambaModel model() {
        MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(4).dState(2).dConv(2).expand(1).layers(1).build())
                .inputDim(2).seed(3).build();
        TestUtil.randomizeWeights(m, new Random(3));
        return m;
    }

    private static int headerEnd(byte[] file) {
        return 8 + (int) ByteBuffer.wrap(file).order(ByteOrder.LITTLE_ENDIAN).getLong(0);
    }

    private static void assertSameModel(MambaModel a, MambaModel b) {
        assertEquals(a.config(), b.config());
        assertEquals(a.inputDim(), b.inputDim());
        assertEquals(a.vocabSize(), b.vocabSize());
        for (String n : a.parameterNames()) assertArrayEquals(a.getParameter(n), b.getParameter(n), 0f, n);
    }

    @Test
    void everyHeaderBitFlipIsRejectedOrHarmless() throws Exception {
        Path good = dir.resolve("good.safetensors"), bad = dir.resolve("bad.safetensors");
        int rejected = 0, harmless = 0;
        try (MambaModel original = model()) {
            original.save(good);
            byte[] bytes = Files.readAllBytes(good);
            int end = headerEnd(bytes);
            for (int bit = 0; bit < end * 8; bit++) {
                byte[] flipped = bytes.clone();
                flipped[bit / 8] ^= (byte) (1 << (bit % 8));
                Files.write(bad, flipped);
                try (MambaModel loaded = MambaModel.load(bad)) {
                    assertSameModel(original, loaded);  // e.g. a flip in the JSON padding or a spelling that means the same
                    harmless++;
                } catch (CheckpointException expected) {
                    rejected++;
                }
            }
            System.out.printf("header bit flips: %d rejected, %d harmless, 0 loaded a different model%n", rejected, harmless);
            assertTrue(rejected > 0.9 * (rejected + harmless));
        }
    }

    @Test
    void everyDataBitFlipIsRejected() throws Exception {
        Path good = dir.resolve("good.safetensors"), bad = dir.resolve("bad.safetensors");
        try (MambaModel original = model()) {
            original.save(good);
        }
        byte[] bytes = Files.readAllBytes(good);
        for (int bit = headerEnd(bytes) * 8; bit < bytes.length * 8; bit++) {
            byte[] flipped = bytes.clone();
            flipped[bit / 8] ^= (byte) (1 << (bit % 8));
            Files.write(bad, flipped);
            int b = bit;
            CheckpointException e = assertThrows(CheckpointException.class, () -> MambaModel.load(bad), () -> "bit " + b);
            assertTrue(e.getMessage().contains("checksum mismatch") || e.getMessage().contains("non-finite"), e.getMessage());
        }
    }

    /** The case that motivated the checksum: a consistent-looking edit of norm_eps (1.0E-5 → 1.0E-1). */
    @Test
    void anEditedNormEpsIsCaught() throws Exception {
        Path f = dir.resolve("m.safetensors");
        try (MambaModel m = model()) {
            m.save(f);
        }
        byte[] bytes = Files.readAllBytes(f);
        String text = new String(bytes, StandardCharsets.ISO_8859_1);
        int at = text.indexOf("norm_eps\\\":1.0E-5");
        assertTrue(at > 0, "the saved config spells norm_eps as 1.0E-5");
        bytes[at + "norm_eps\\\":1.0E-".length()] = '1';
        Files.write(f, bytes);
        CheckpointException e = assertThrows(CheckpointException.class, () -> MambaModel.load(f));
        assertTrue(e.getMessage().contains("checksum mismatch"), e.getMessage());
    }

    @Test
    void versionOneFilesWithoutAChecksumStillLoad() throws Exception {
        Path v2 = dir.resolve("v2.safetensors"), v1 = dir.resolve("v1.safetensors"), lost = dir.resolve("lost.safetensors");
        try (MambaModel m = model()) {
            m.save(v2);
            rewrite(v2, v1, meta -> {
                meta.remove(CheckpointChecksum.KEY);
                meta.put("format_version", "1");
            });
            try (MambaModel old = MambaModel.load(v1)) {
                assertSameModel(m, old);
            }
            rewrite(v2, lost, meta -> meta.remove(CheckpointChecksum.KEY));
            CheckpointException e = assertThrows(CheckpointException.class, () -> MambaModel.load(lost));
            assertTrue(e.getMessage().contains("has no 'checksum'"), e.getMessage());
        }
    }

    @Test
    void optimizerStatesAndHeadsAreCheckedToo() throws Exception {
        Path adamw = dir.resolve("adamw.safetensors"), head = dir.resolve("head.safetensors");
        try (MambaModel m = model(); Trainer t = Trainer.builder(m).crossEntropyHead(3).build()) {
            t.stepCrossEntropy(new float[] {0.5f, -1}, new int[] {2});
            t.exportOptimizerState().save(adamw);
            t.head().save(head);
        }
        OptimizerState.load(adamw);
        LinearHead.load(head);
        Random rng = new Random(5);
        for (Path f : List.of(adamw, head)) {
            byte[] bytes = Files.readAllBytes(f);
            for (int i = 0; i < 200; i++) {
                int bit = headerEnd(bytes) * 8 + rng.nextInt((bytes.length - headerEnd(bytes)) * 8);
                byte[] flipped = bytes.clone();
                flipped[bit / 8] ^= (byte) (1 << (bit % 8));
                Path bad = dir.resolve("bad-" + f.getFileName());
                Files.write(bad, flipped);
                try {
                    if (f == adamw) OptimizerState.load(bad);
                    else LinearHead.load(bad);
                    fail(f.getFileName() + ": data bit " + bit + " flipped and the file still loaded");
                } catch (CheckpointException expected) {
                    // checksum mismatch, or a value the loader refuses anyway
                }
            }
        }
    }

    /** Copies {@code from} to {@code to} with edited metadata and the same tensors, bypassing the checksum. */
    private static void rewrite(Path from, Path to, Consumer<Map<String, String>> edit) {
        Map<String, String> meta;
        List<SafeTensors.Entry> entries = new ArrayList<>();
        try (SafeTensorsFile f = SafeTensorsFile.open(from)) {
            meta = new LinkedHashMap<>(f.metadata());
            for (var t : f.tensors()) entries.add(new SafeTensors.Entry(t.name(), t.shape(), f.readFloats(t.name())));
        }
        edit.accept(meta);
        SafeTensors.write(to, meta, entries);
    }
}
