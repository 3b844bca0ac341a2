package org.mamba4j;

import org.bytedeco.javacpp.Loader;
import org.mamba4j.nativ.global.libmamba;

/**
 * Loads libmamba (and OpenBLAS) from the platform jar once, and turns native errors into mamba4j
 * exceptions. Internal: the native peers in {@code org.mamba4j.nativ} are not part of the public API.
 */
final class Native {
    private static volatile boolean loaded;

    private Native() {}

    /** Loads the natives on first use; throws {@link MambaException} if this platform has none. */
    static void load() {
        if (loaded) return;
        synchronized (Native.class) {
            if (loaded) return;
            try {
                Loader.load(libmamba.class);
            } catch (UnsatisfiedLinkError e) {
                throw new MambaException("could not load libmamba for " + Loader.getPlatform()
                        + " (is mamba-presets-<version>-linux-x86_64.jar on the class path?): " + e.getMessage(), e);
            }
            loaded = true;
        }
    }

    /** Runs a native call, turning native errors into mamba4j exceptions. */
    static <T> T get(java.util.function.Supplier<T> nativeCall) {
        try {
            return nativeCall.get();
        } catch (RuntimeException e) {
            throw translate(e);
        }
    }

    /** As {@link #get}, for calls without a result. */
    static void run(Runnable nativeCall) {
        get(() -> {
            nativeCall.run();
            return null;
        });
    }

    /** Maps a native error (a C++ exception's message) onto the matching mamba4j exception. */
    static RuntimeException translate(RuntimeException e) {
        if (e instanceof MambaException) return e;
        String m = e.getMessage() == null ? e.toString() : e.getMessage();
        if (m.startsWith("out of memory")) return new OutOfDeviceMemoryException(m);
        if (m.startsWith("no CUDA device"))
            return new DeviceUnavailableException(m);
        return new MambaException(m, e);
    }
}
