package org.mamba4j;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import org.bytedeco.javacpp.FloatPointer;
import org.bytedeco.javacpp.IntPointer;
import org.bytedeco.javacpp.Pointer;

/**
 * Reusable native host buffers for a model's large inputs and outputs (logits of many rows, whole-sequence outputs).
 * Handing a Java array to a native call makes JNI allocate a native copy, copy the array in and copy it back out —
 * for 256 rows × 50,280 logits (51 MB) that was two-thirds of a CPU step (40 ms against 12.5 ms through reused
 * buffers, docs/benchmarks.md). Here a call leases buffers from the pool ({@link #lease()}), the native side reads
 * and writes them, one copy moves the result into the caller's array, and closing the lease gives the buffers back.
 * Calls on one model may run on several threads at once, so a lease that finds no buffer big enough allocates its
 * own. What the pool keeps between calls is bounded: at most {@link #KEEP} buffers of each kind and
 * {@link #MAX_KEPT_BYTES} in all (the least recently returned go first), so one huge call (logits of a whole batch
 * of sequences) does not pin its buffers for the model's life. Closed with the model's native peer.
 */
final class HostStaging implements AutoCloseable {
    /** Calls moving fewer floats than this go through plain Java arrays (JNI's copies are cheap there). */
    static final long MIN_FLOATS = 1 << 16;
    /** The bound in use: package-private so that tests can send every call down one path or the other. */
    static volatile long minFloats = MIN_FLOATS;
    private static final int KEEP = 4;
    /** Bytes of buffers kept between calls, both kinds together (enough for 256 rows of 50,280 logits twice over). */
    static final long MAX_KEPT_BYTES = 128L << 20;

    private final ArrayDeque<FloatPointer> floats = new ArrayDeque<>();
    private final ArrayDeque<IntPointer> ints = new ArrayDeque<>();
    private boolean closed;

    /** Whether a call moving n floats (its largest array, or its inputs together) should be staged. */
    static boolean worth(long n) {
        return n >= minFloats;
    }

    /** Buffers for one native call; closing it gives them back to the pool. */
    Lease lease() {
        return new Lease();
    }

    final class Lease implements AutoCloseable {
        private final List<Pointer> taken = new ArrayList<>(3);

        /** A buffer holding a copy of values (an input). */
        FloatPointer floats(float[] values) {
            FloatPointer p = floats(values.length);
            p.put(values);
            return p;
        }

        /** A buffer of at least n floats (an output; copy it out with {@code get(array)}). */
        FloatPointer floats(long n) {
            FloatPointer p = take(HostStaging.this.floats, n);
            taken.add(p);
            return p;
        }

        /** A buffer holding a copy of values (an input). */
        IntPointer ints(int[] values) {
            IntPointer p = take(HostStaging.this.ints, values.length);
            taken.add(p);
            p.put(values);
            return p;
        }

        @Override
        public void close() {
            for (Pointer p : taken) {
                if (p instanceof IntPointer ip) give(ints, ip);
                else give(floats, (FloatPointer) p);
            }
            taken.clear();
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
        if (closed || bytes(p) > MAX_KEPT_BYTES) {
            p.close();
            return;
        }
        pool.addFirst(p);
        if (pool.size() > KEEP) pool.pollLast().close();  // the least recently returned
        while (keptBytes() > MAX_KEPT_BYTES) {
            ArrayDeque<? extends Pointer> from = floats.isEmpty() ? ints : ints.isEmpty() ? floats
                    : bytes(floats.peekLast()) >= bytes(ints.peekLast()) ? floats : ints;
            from.pollLast().close();
        }
    }

    private static long bytes(Pointer p) {
        return p.capacity() * p.sizeof();
    }

    /** Bytes the pool holds now (for the bound above; tests read it). */
    synchronized long keptBytes() {
        long b = 0;
        for (Pointer p : floats) b += bytes(p);
        for (Pointer p : ints) b += bytes(p);
        return b;
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
