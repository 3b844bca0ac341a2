package org.mamba4j;

import java.nio.ByteOrder;
import java.nio.FloatBuffer;

/** Argument checks shared by the API classes: clear Java exceptions before anything reaches native code. */
final class Checks {
    private Checks() {}

    static void length(String what, long got, long expected) {
        if (got != expected)
            throw new IllegalArgumentException(what + " has " + got + " floats, expected " + expected);
    }

    /**
     * A direct input buffer in the platform's byte order with exactly {@code expected} floats remaining.
     * libmamba reads the buffer's memory as native floats: a view of a big-endian {@code ByteBuffer} (the
     * default order of {@code ByteBuffer.allocateDirect}) would be read as garbage, so it is refused.
     */
    static void input(String what, FloatBuffer b, long expected) {
        if (b == null) throw new NullPointerException(what + " is null");
        if (!b.isDirect()) throw new IllegalArgumentException(what + " must be a direct FloatBuffer (or pass a float[])");
        if (b.order() != ByteOrder.nativeOrder())
            throw new IllegalArgumentException(what + " is a " + b.order() + " buffer but native code reads " + ByteOrder.nativeOrder()
                    + " floats: create it with ByteBuffer.allocateDirect(n).order(ByteOrder.nativeOrder()).asFloatBuffer()");
        length(what + ".remaining()", b.remaining(), expected);
    }

    /** A direct, writable output buffer with exactly {@code expected} floats remaining. */
    static void output(String what, FloatBuffer b, long expected) {
        input(what, b, expected);
        if (b.isReadOnly()) throw new IllegalArgumentException(what + " is read-only");
    }

    /** NaN or infinite values would silently poison weights or a recurrent state; reject them at the door. */
    static void finite(String what, float[] v) {
        for (int i = 0; i < v.length; i++)
            if (!Float.isFinite(v[i])) throw new IllegalArgumentException(what + "[" + i + "] is " + v[i]);
    }

    /** As {@link #finite(String, float[])} for the remaining floats of a buffer (indexes from its position). */
    static void finite(String what, FloatBuffer b) {
        for (int i = b.position(), n = b.limit(); i < n; i++) {
            float f = b.get(i);
            if (!Float.isFinite(f)) throw new IllegalArgumentException(what + "[" + (i - b.position()) + "] is " + f);
        }
    }

    static void positive(String what, int v) {
        if (v < 1) throw new IllegalArgumentException(what + " = " + v + " must be >= 1");
    }
}
