package org.mamba4j;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.net.JarURLConnection;
import java.net.URL;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Enumeration;
import java.util.List;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;
import java.util.zip.CRC32;
import org.bytedeco.javacpp.Loader;

/**
 * Drops copies of our natives in JavaCPP's cache that no longer match the jar they came from, before JavaCPP loads
 * them. JavaCPP reuses a cached file when its size and time stamp equal the jar entry's; our jars are reproducible
 * (every entry has the same fixed time stamp), so a rebuilt library of the same size — common for the CUDA build,
 * whose sections are padded — would silently keep running the old code. The jar's directory stores each entry's
 * CRC-32, so comparing it with the cached file's costs one read of the file (≈ 20 ms for the 23 MB CUDA build).
 */
final class NativeCache {
    private static final System.Logger LOG = System.getLogger(NativeCache.class.getName());

    private NativeCache() {}

    /** For the natives of {@code platform} next to {@code anchor}'s resources; never throws (a failed check is logged). */
    static void dropStaleCopies(Class<?> anchor, String platform) {
        String dir = "org/mamba4j/nativ/" + platform + "/";
        URL url = anchor.getResource("/" + dir + "libmamba.so");
        if (url == null || !"jar".equals(url.getProtocol())) return;  // a directory on the class path: nothing cached
        try {
            JarURLConnection connection = (JarURLConnection) url.openConnection();
            connection.setUseCaches(false);
            File jarFile = new File(connection.getJarFileURL().toURI());
            try (JarFile jar = connection.getJarFile()) {
                for (File f : dropStale(jar, jarFile.getName(), Loader.getCacheDir(), dir))
                    LOG.log(System.Logger.Level.DEBUG, () -> "deleted a stale cached native library: " + f);
            }
        } catch (Exception | LinkageError e) {
            LOG.log(System.Logger.Level.DEBUG, "could not check JavaCPP's cache for stale natives", e);
        }
    }

    /**
     * Deletes each file {@code cacheRoot/jarName/<entry>} for the entries of {@code jar} under {@code dir} whose size
     * equals the entry's but whose CRC-32 does not (a different size JavaCPP replaces by itself); returns them.
     */
    static List<File> dropStale(JarFile jar, String jarName, File cacheRoot, String dir) throws IOException {
        List<File> deleted = new ArrayList<>();
        File base = new File(cacheRoot, jarName);
        for (Enumeration<JarEntry> en = jar.entries(); en.hasMoreElements(); ) {
            JarEntry e = en.nextElement();
            if (e.isDirectory() || !e.getName().startsWith(dir) || e.getCrc() < 0) continue;
            File cached = new File(base, e.getName());
            if (cached.isFile() && cached.length() == e.getSize() && crc32(cached) != e.getCrc()) {
                Files.delete(cached.toPath());
                deleted.add(cached);
            }
        }
        return deleted;
    }

    private static long crc32(File f) throws IOException {
        CRC32 crc = new CRC32();
        byte[] buf = new byte[1 << 16];
        try (InputStream in = Files.newInputStream(f.toPath())) {
            for (int n; (n = in.read(buf)) > 0; ) crc.update(buf, 0, n);
        }
        return crc.getValue();
    }
}
