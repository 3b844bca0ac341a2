package org.mamba4j.io;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A write deletes the temporary files killed writers of the same file left behind — and only those: not a temp
 * file a live writer holds locked, not another file's temp files, not look-alike names.
 */
class TempFileCleanupTest {
    @TempDir Path dir;

    @Test
    void leftoversOfKilledWritersAreDeletedByTheNextWrite() throws Exception {
        Path target = dir.resolve("m.safetensors");
        Path stale1 = Files.write(dir.resolve("m.safetensors.tmp-1f2e3d4c5b6a7980"), new byte[100]);
        Path stale2 = Files.write(dir.resolve("m.safetensors.tmp-0"), new byte[0]);
        Path live = Files.write(dir.resolve("m.safetensors.tmp-abc"), new byte[10]);
        Path otherFile = Files.write(dir.resolve("other.safetensors.tmp-abc"), new byte[10]);
        Path lookAlike = Files.write(dir.resolve("m.safetensors.tmp-notes"), new byte[10]);
        try (FileChannel ch = FileChannel.open(live, StandardOpenOption.WRITE); FileLock writing = ch.lock()) {
            SafeTensors.write(target, Map.of("k", "v"), List.of(new SafeTensors.Entry("w", new long[] {2}, new float[] {1, 2})));
            assertTrue(Files.exists(live), "a temp file locked by a writer in progress stays");
        }
        assertFalse(Files.exists(stale1));
        assertFalse(Files.exists(stale2));
        assertTrue(Files.exists(otherFile) && Files.exists(lookAlike));
        try (SafeTensorsFile f = SafeTensorsFile.open(target)) {
            assertEquals(Map.of("k", "v"), f.metadata());
        }
        SafeTensors.write(target, Map.of(), List.of());  // now unlocked: the next write removes it
        assertFalse(Files.exists(live));
    }
}
