package org.mamba4j;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import org.bytedeco.javacpp.FloatPointer;
import org.bytedeco.javacpp.IntPointer;
import org.bytedeco.javacpp.Pointer;
import org.mamba4j.nativ.HostBuffer;

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
 *
 * <p>For a CUDA model the buffers are page-locked ({@link HostBuffer}): libmamba's copies then run by DMA straight
 * from them, where plain memory went through a second copy into the library's own pinned staging (or, past its
 * 64 MiB, an unpinned transfer) — for a backbone batch of 8 × 2,048 × 768 inputs and targets that was most of the
 * gap between its step and the language model's. Page-locked memory is costly to allocate, so a CUDA pool keeps up to
 * {@link #PINNED_MAX_KEPT_BYTES} (a T = 8,192 batch's inputs and targets). {@code -Dmamba4j.pinnedStaging=false}
 * keeps plain buffers on every device (a process with many GPU models and little page-lockable memory).
 */
final class HostStaging implements AutoCloseable {
    /** Calls moving fewer floats than this go through plain Java arrays (JNI's copies are cheap there). */
    static final long MIN_FLOATS = 1 << 16;
    /** The bound in use: package-private so that tests can send every call down one path or the other. */
    static volatile long minFloats = MIN_FLOATS;
    private static final int KEEP = 4;
    /** Bytes of buffers kept between calls, both kinds together (enough for 256 rows of 50,280 logits twice over). */
    static final long MAX_KEPT_BYTES = 128L << 20;
    /** The same for a CUDA model's page-locked buffers. */
    static final long PINNED_MAX_KEPT_BYTES = 1L << 30;

    /** One pooled buffer: a typed view of its memory and what frees it (the view itself, or a HostBuffer). */
    private record Block(Pointer view, Pointer owner) {
        long bytes() {
            return view.capacity() * view.sizeof();
        }
    }

    private final int device;  // the model's device code: DEVICE_CPU (-1) or a CUDA ordinal
    private final long maxKeptBytes;
    private final ArrayDeque<Block> floats = new ArrayDeque<>();
    private final ArrayDeque<Block> ints = new ArrayDeque<>();
    private boolean closed;

    /** Plain host buffers (a CPU model). */
    HostStaging() {
        this(-1);
    }

    /** Buffers for a model on {@code device} (a device code: -1 for the CPU, else a CUDA ordinal). */
    HostStaging(int device) {
        this.device = device >= 0 && Boolean.parseBoolean(System.getProperty("mamba4j.pinnedStaging", "true")) ? device : -1;
        this.maxKeptBytes = this.device < 0 ? MAX_KEPT_BYTES : PINNED_MAX_KEPT_BYTES;
    }

    /** The bound on what this pool keeps between calls. */
    long maxKeptBytes() {
        return maxKeptBytes;
    }

    /** Whether a call moving n floats (its largest array, or its inputs together) should be staged. */
    static boolean worth(long n) {
        return n >= minFloats;
    }

    /** Buffers for one native call; closing it gives them back to the pool. */
    Lease lease() {
        return new Lease();
    }

    final class Lease implements AutoCloseable {
        private final List<Block> taken = new ArrayList<>(3);

        /** A buffer holding a copy of values (an input). */
        FloatPointer floats(float[] values) {
            FloatPointer p = floats(values.length);
            p.put(values);
            return p;
        }

        /** A buffer of at least n floats (an output; copy it out with {@code get(array)}). */
        FloatPointer floats(long n) {
            return (FloatPointer) take(HostStaging.this.floats, n, false, taken);
        }

        /** A buffer holding a copy of values (an input). */
        IntPointer ints(int[] values) {
            IntPointer p = (IntPointer) take(HostStaging.this.ints, values.length, true, taken);
            p.put(values);
            return p;
        }

        @Override
        public void close() {
            for (Block b : taken) give(b.view() instanceof IntPointer ? ints : floats, b);
            taken.clear();
        }
    }

    private synchronized Pointer take(ArrayDeque<Block> pool, long n, boolean isInt, List<Block> into) {
        Block found = null;
        for (var it = pool.iterator(); it.hasNext(); ) {
            Block b = it.next();
            if (b.view().capacity() >= n) {
                it.remove();
                b.view().position(0);
                found = b;
                break;
            }
        }
        if (found == null) found = allocate(Math.max(1, n), isInt);
        into.add(found);
        return found.view();
    }

    /** A new buffer of n elements: page-locked for a CUDA model (where the driver grants it), else plain. */
    private Block allocate(long n, boolean isInt) {
        if (device < 0) {
            Pointer p = isInt ? new IntPointer(n) : new FloatPointer(n);
            return new Block(p, p);
        }
        HostBuffer owner = new HostBuffer(device, n * 4);
        Pointer view = isInt ? new IntPointer(owner.data()) : new FloatPointer(owner.data());
        return new Block(view.capacity(n), owner);
    }

    private synchronized void give(ArrayDeque<Block> pool, Block b) {
        if (closed || b.bytes() > maxKeptBytes) {
            b.owner().close();
            return;
        }
        pool.addFirst(b);
        if (pool.size() > KEEP) pool.pollLast().owner().close();  // the least recently returned
        while (keptBytes() > maxKeptBytes) {
            ArrayDeque<Block> from = floats.isEmpty() ? ints : ints.isEmpty() ? floats
                    : floats.peekLast().bytes() >= ints.peekLast().bytes() ? floats : ints;
            from.pollLast().owner().close();
        }
    }

    /** Bytes the pool holds now (for the bound above; tests read it). */
    synchronized long keptBytes() {
        long bytes = 0;
        for (Block b : floats) bytes += b.bytes();
        for (Block b : ints) bytes += b.bytes();
        return bytes;
    }

    /** Whether the pool's buffers are page-locked (a CUDA model whose driver granted it; tests read it). */
    synchronized boolean keepsPinned() {
        for (Block b : floats) if (b.owner() instanceof HostBuffer h && h.pinned()) return true;
        return false;
    }

    @Override
    public synchronized void close() {
        closed = true;
        floats.forEach(b -> b.owner().close());
        ints.forEach(b -> b.owner().close());
        floats.clear();
        ints.clear();
    }
}
