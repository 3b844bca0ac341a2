package org.mamba4j;

import org.bytedeco.javacpp.Loader;
import org.mamba4j.nativ.global.libmamba;

/**
 * Loads libmamba (and OpenBLAS) from the platform jar once. Internal: the native peers in
 * {@code org.mamba4j.nativ} are not part of the public API; calls into them go through {@link NativeGuard}.
 */
final class Native {
    private static final System.Logger LOG = System.getLogger(Native.class.getName());
    private static volatile boolean loaded;

    private Native() {}

    /** A returned {@code std::string} as Java text: JavaCPP hands an empty one back as a null pointer. */
    static String text(org.bytedeco.javacpp.BytePointer s) {
        return s == null ? "" : s.getString();
    }

    /** Loads the natives on first use; throws {@link MambaException} if this platform has none. */
    static void load() {
        if (loaded) return;
        synchronized (Native.class) {
            if (loaded) return;
            long start = System.nanoTime();
            LOG.log(System.Logger.Level.DEBUG, () -> "loading libmamba for " + Loader.getPlatform() + " (JavaCPP cache: "
                    + System.getProperty("org.bytedeco.javacpp.cachedir", "~/.javacpp/cache") + ")");
            NativeCache.dropStaleCopies(libmamba.class, Loader.getPlatform());  // a rebuilt jar must not load old code
            String path;
            try {
                path = Loader.load(libmamba.class);
            } catch (UnsatisfiedLinkError e) {
                LOG.log(System.Logger.Level.DEBUG, "loading libmamba failed", e);
                throw new MambaException("could not load libmamba for " + Loader.getPlatform()
                        + " (is mamba-presets-<version>-linux-x86_64.jar on the class path? mamba4j-platform brings it): "
                        + e.getMessage(), e);
            }
            LOG.log(System.Logger.Level.DEBUG, () -> String.format("loaded %s in %.0f ms", path, (System.nanoTime() - start) / 1e6));
            loaded = true;
        }
    }
}
