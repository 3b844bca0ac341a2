package org.mamba4j;

import java.util.ArrayDeque;
import org.bytedeco.javacpp.FloatPointer;
import org.bytedeco.javacpp.IntPointer;

/**
 * Reusable native host buffers for a model's large outputs (logits of many rows). Handing a Java array to a native
 * call makes JNI allocate a native copy, copy the array in and copy it back out — for 256 rows × 50,280 logits
 * (51 MB) that was two-thirds of a CPU step (40 ms against 14 ms through a reused buffer, this machine). A call takes
 * a buffer pair, the native side writes into it, one copy moves the result into the caller's array, and the pair
 * goes back to the pool. Calls on one model may run on several threads at once, so a call that finds the pool empty
 * allocates its own pair; at most {@link #KEEP} pairs are kept. Closed with the model's native peer.
 */
final class HostStaging implements AutoCloseable {
    /** Outputs below this many floats go through plain Java arrays (JNI's copies are cheap there). */
    static final long MIN_FLOATS = 1 << 16;
    private static final int KEEP = 4;

    /** Ids in, floats out. */
    static final class Pair {
        final IntPointer ids;
        final FloatPointer out;

        private Pair(long idCount, long outCount) {
            ids = new IntPointer(Math.max(1, idCount));
            out = new FloatPointer(Math.max(1, outCount));
        }

        boolean fits(long idCount, long outCount) {
            return ids.capacity() >= idCount && out.capacity() >= outCount;
        }

        void free() {
            ids.close();
            out.close();
        }
    }

    private final ArrayDeque<Pair> pool = new ArrayDeque<>();
    private boolean closed;

    /** A pair holding at least idCount ids and outCount floats, positions at 0. */
    synchronized Pair take(long idCount, long outCount) {
        Pair p = pool.pollFirst();
        if (p != null && !p.fits(idCount, outCount)) {
            p.free();
            p = null;
        }
        if (p == null) p = new Pair(idCount, outCount);
        p.ids.position(0);
        p.out.position(0);
        return p;
    }

    synchronized void give(Pair p) {
        if (closed || pool.size() >= KEEP) p.free();
        else pool.addFirst(p);
    }

    @Override
    public synchronized void close() {
        closed = true;
        for (Pair p : pool) p.free();
        pool.clear();
    }
}
