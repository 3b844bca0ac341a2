package org.mamba4j;


/**
 * Maps libmamba's errors onto the exceptions the API promises. JavaCPP rethrows every C++ exception as a
 * plain {@link RuntimeException} carrying {@code what()}: the C++ type is lost on the way, so the kind has
 * to travel in the message. The contract with libmamba is a stable tag at the start of the message:
 *
 * <ul>
 *   <li>{@value #INVALID_ARGUMENT} ({@code std::invalid_argument}) and {@value #OUT_OF_RANGE}
 *       ({@code std::out_of_range}) → {@link IllegalArgumentException}, or {@link InvalidConfigException}
 *       for a call that builds something from a configuration;
 *   <li>{@value #ILLEGAL_STATE} (a call out of order, {@code std::logic_error}) → {@link IllegalStateException};
 *   <li>{@value #OUT_OF_MEMORY} ({@code mamba::OutOfMemoryError}) → {@link OutOfDeviceMemoryException};
 *   <li>{@value #NO_DEVICE} → {@link DeviceUnavailableException};
 *   <li>anything else ({@code std::runtime_error}, CUDA failures) → {@link MambaException}.
 * </ul>
 *
 * The argument tags are stripped (the exception type says it); the last two are kept, they read as
 * sentences. A message without a tag is an internal error and stays a {@link MambaException}.
 */
final class NativeErrors {
    static final String INVALID_ARGUMENT = "invalid argument: ";
    static final String OUT_OF_RANGE = "out of range: ";
    static final String ILLEGAL_STATE = "illegal state: ";
    static final String OUT_OF_MEMORY = "out of memory";
    static final String NO_DEVICE = "no CUDA device";

    private NativeErrors() {}

    /**
     * The exception to throw for {@code e}, caught around a native call. Only a native error is translated: a
     * plain {@code RuntimeException} (what JavaCPP throws) raised by a native method. Anything else — a Java
     * check inside the call, a user's callback — passes through unchanged.
     *
     * @param config whether the call builds from a configuration (its argument errors are config errors)
     */
    static RuntimeException translate(RuntimeException e, boolean config) {
        if (!isNative(e)) return e;
        String m = e.getMessage() == null ? e.toString() : e.getMessage();
        if (m.startsWith(INVALID_ARGUMENT)) return argument(m.substring(INVALID_ARGUMENT.length()), config, e);
        if (m.startsWith(OUT_OF_RANGE)) return argument(m.substring(OUT_OF_RANGE.length()), config, e);
        if (m.startsWith(ILLEGAL_STATE)) return new IllegalStateException(m.substring(ILLEGAL_STATE.length()), e);
        if (m.startsWith(OUT_OF_MEMORY)) return new OutOfDeviceMemoryException(m);
        if (m.startsWith(NO_DEVICE)) return new DeviceUnavailableException(m);
        return new MambaException(m, e);
    }

    /** Thrown by JavaCPP from a native method (its top frame), not by Java code that happened to run inside a call. */
    static boolean isNative(RuntimeException e) {
        if (e.getClass() != RuntimeException.class) return false;
        StackTraceElement[] trace = e.getStackTrace();
        return trace.length == 0 || trace[0].isNativeMethod();  // no trace: the JVM omits them; assume native
    }

    private static RuntimeException argument(String message, boolean config, RuntimeException cause) {
        if (config) return new InvalidConfigException(message);
        return new IllegalArgumentException(message, cause);
    }
}
