package org.mamba4j;

import java.util.ArrayDeque;
import java.util.function.BiConsumer;
import java.util.function.Consumer;
import org.bytedeco.javacpp.FloatPointer;
import org.bytedeco.javacpp.IntPointer;
import org.bytedeco.javacpp.Pointer;

/**
 * Reusable native host buffers for a model's large inputs and outputs (logits of many rows, whole-sequence outputs).
 * Handing a Java array to a native call makes JNI allocate a native copy, copy the array in and copy it back out —
 * for 256 rows × 50,280 logits (51 MB) that was two-thirds of a CPU step (40 ms against 12.5 ms through reused
 * buffers, docs/benchmarks.md). Here a call takes buffers from the pool, the native side reads and writes them, one
 * copy moves the result into the caller's array, and the buffers go back. Calls on one model may run on several
 * threads at once, so a call that finds the pool empty allocates its own; at most {@link #KEEP} buffers of each
 * kind are kept. Closed with the model's native peer.
 */
final class HostStaging implements AutoCloseable {
    /** Outputs below this many floats go through plain Java arrays (JNI's copies are cheap there). */
    static final long MIN_FLOATS = 1 << 16;
    private static final int KEEP = 4;

    private final ArrayDeque<FloatPointer> floats = new ArrayDeque<>();
    private final ArrayDeque<IntPointer> ints = new ArrayDeque<>();
    private boolean closed;

    /** Whether an output of n floats should be staged. */
    static boolean worth(long n) {
        return n >= MIN_FLOATS;
    }

    /** call(ids staged, output buffer), then the output copied into out. */
    void idsToFloats(int[] ids, float[] out, BiConsumer<IntPointer, FloatPointer> call) {
        stage(ints, ids.length, p -> p.put(ids), out, call);
    }

    /** call(x staged, output buffer), then the output copied into out. */
    void floatsToFloats(float[] x, float[] out, BiConsumer<FloatPointer, FloatPointer> call) {
        stage(floats, x.length, p -> p.put(x), out, call);
    }

    private <P extends Pointer> void stage(ArrayDeque<P> inPool, long inCount, Consumer<P> fill, float[] out,
                                           BiConsumer<P, FloatPointer> call) {
        P in = take(inPool, inCount);
        FloatPointer o = null;
        try {
            o = take(floats, out.length);
            fill.accept(in);
            call.accept(in, o);
            o.get(out);
        } finally {
            give(inPool, in);
            if (o != null) give(floats, o);
        }
    }

    private synchronized <P extends Pointer> P take(ArrayDeque<P> pool, long n) {
        for (var it = pool.iterator(); it.hasNext(); ) {
            P p = it.next();
            if (p.capacity() >= n) {
                it.remove();
                p.position(0);
                return p;
            }
        }
        @SuppressWarnings("unchecked")
        P fresh = (P) (pool == floats ? new FloatPointer(Math.max(1, n)) : new IntPointer(Math.max(1, n)));
        return fresh;
    }

    private synchronized <P extends Pointer> void give(ArrayDeque<P> pool, P p) {
        if (closed) {
            p.close();
            return;
        }
        pool.addFirst(p);
        if (pool.size() > KEEP) pool.pollLast().close();  // the least recently returned
    }

    @Override
    public synchronized void close() {
        closed = true;
        floats.forEach(Pointer::close);
        ints.forEach(Pointer::close);
        floats.clear();
        ints.clear();
    }
}
