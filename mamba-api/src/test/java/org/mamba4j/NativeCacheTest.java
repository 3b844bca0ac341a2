package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;
import java.util.jar.JarOutputStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A rebuilt native library of the same size must not be served from JavaCPP's cache: {@link NativeCache} deletes a
 * cached copy whose CRC-32 differs from its jar entry's and keeps everything else.
 */
class NativeCacheTest {
    private static final String DIR = "org/mamba4j/nativ/test-x86_64/";

    @TempDir Path tmp;

    private static void put(JarOutputStream out, String name, String content) throws Exception {
        JarEntry e = new JarEntry(name);
        e.setTime(1_700_000_000_000L);  // a fixed time stamp, as a reproducible build writes
        out.putNextEntry(e);
        out.write(content.getBytes(StandardCharsets.UTF_8));
        out.closeEntry();
    }

    private Path cached(String name, String content) throws Exception {
        Path p = tmp.resolve("cache").resolve("natives.jar").resolve(DIR + name);
        Files.createDirectories(p.getParent());
        return Files.writeString(p, content);
    }

    @Test
    void aSameSizeCopyWithOtherBytesIsDroppedTheRestIsKept() throws Exception {
        Path jarPath = tmp.resolve("natives.jar");
        try (JarOutputStream out = new JarOutputStream(Files.newOutputStream(jarPath))) {
            put(out, DIR + "libmamba.so", "new build, same size");
            put(out, DIR + "libjnilibmamba.so", "unchanged wrapper");
            put(out, DIR + "libother.so", "longer than the copy in the cache");
            put(out, "org/mamba4j/elsewhere/libmamba.so", "not a native of this platform");
        }
        Path stale = cached("libmamba.so", "old build, same size");
        Path same = cached("libjnilibmamba.so", "unchanged wrapper");
        Path shorter = cached("libother.so", "short");  // JavaCPP replaces a different size by itself
        Path notInJar = cached("libextra.so", "something else");
        List<File> deleted;
        try (JarFile jar = new JarFile(jarPath.toFile())) {
            deleted = NativeCache.dropStale(jar, "natives.jar", tmp.resolve("cache").toFile(), DIR);
        }
        assertEquals(List.of(stale.toFile()), deleted);
        assertFalse(Files.exists(stale), "the stale copy is gone, so JavaCPP extracts the new one");
        assertTrue(Files.exists(same) && Files.exists(shorter) && Files.exists(notInJar));
    }

    @Test
    void noCacheFolderIsNothingToDo() throws Exception {
        Path jarPath = tmp.resolve("natives.jar");
        try (JarOutputStream out = new JarOutputStream(Files.newOutputStream(jarPath))) {
            put(out, DIR + "libmamba.so", "x");
        }
        try (JarFile jar = new JarFile(jarPath.toFile())) {
            assertEquals(List.of(), NativeCache.dropStale(jar, "natives.jar", tmp.resolve("absent").toFile(), DIR));
        }
    }

    @Test
    void loadingStillWorksAfterTheCheck() {
        NativeCache.dropStaleCopies(Native.class, "linux-x86_64");  // whatever the class path holds: no exception
        Native.load();
        assertTrue(Device.cpu().isCpu());
    }
}
