package org.mamba4j;

import java.util.Arrays;
import java.util.Comparator;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Supplier;

/**
 * The one way to reach a native peer: every object that owns one ({@link MambaModel}, {@link MambaState},
 * {@link Tensor}, {@link Trainer}) calls native code only through its guard, which
 * <ol>
 *   <li>takes the lock — a model's lock is shared by its states and trainers, because libmamba allows one
 *       call at a time per model and everything that touches it;
 *   <li>checks that the object, and its owner (the model of a state or trainer), are not closed — an
 *       {@link IllegalStateException} naming the object instead of a crash or a JavaCPP NullPointerException;
 *   <li>translates native errors ({@link NativeErrors}).
 * </ol>
 * Closing is idempotent and takes the same lock, so it waits for a call in progress and no call can see a
 * freed peer. Calls that span several guards (a model step on two tensors) take their locks in one global
 * order, so two such calls cannot deadlock.
 */
final class NativeGuard {
    private static final AtomicLong SEQUENCE = new AtomicLong();

    /** A lock with a global rank, so that several are always taken in the same order. */
    private static final class Monitor {
        final long rank = SEQUENCE.incrementAndGet();
    }

    private final String name;
    private final Monitor monitor;
    private final NativeGuard owner;
    private final Runnable release;
    private volatile boolean closed;

    private NativeGuard(String name, Monitor monitor, NativeGuard owner, Runnable release) {
        this.name = name;
        this.monitor = monitor;
        this.owner = owner;
        this.release = Objects.requireNonNull(release, "release");
    }

    /** A guard with its own lock, for an independent object; {@code release} frees the peer on close. */
    static NativeGuard of(String name, Runnable release) {
        return new NativeGuard(name, new Monitor(), null, release);
    }

    /**
     * A guard for an object that belongs to this one (a state or trainer of a model): it shares the lock, and
     * is unusable once either is closed. Closing the owner does not free it; closing it still does.
     */
    NativeGuard dependent(String name, Runnable release) {
        return new NativeGuard(name, monitor, this, release);
    }

    // ---- calls that belong to no object ----

    /** A native call outside any object (device queries, limits): errors translated, nothing locked. */
    static <T> T call(Supplier<T> nativeCall) {
        try {
            return nativeCall.get();
        } catch (RuntimeException e) {
            throw NativeErrors.translate(e, false);
        }
    }

    /** A native call that builds or checks a configuration: its argument errors are {@link InvalidConfigException}s. */
    static <T> T config(Supplier<T> nativeCall) {
        try {
            return nativeCall.get();
        } catch (RuntimeException e) {
            throw NativeErrors.translate(e, true);
        }
    }

    // ---- calls on the guarded object ----

    /** Runs a native call under the lock, after the closed check. */
    <T> T get(Supplier<T> nativeCall) {
        synchronized (monitor) {
            checkOpen();
            return call(nativeCall);
        }
    }

    /** As {@link #get(Supplier)}, for calls without a result. */
    void run(Runnable nativeCall) {
        get(asSupplier(nativeCall));
    }

    /** Runs a native call that also uses other guarded objects: every lock taken (in rank order), every object open. */
    <T> T get(Supplier<T> nativeCall, NativeGuard... others) {
        NativeGuard[] all = Arrays.copyOf(others, others.length + 1);
        all[others.length] = this;
        Monitor[] locks = new Monitor[all.length];
        int n = 0;
        for (NativeGuard g : all) {
            boolean seen = false;
            for (int i = 0; i < n; i++) seen |= locks[i] == g.monitor;
            if (!seen) locks[n++] = g.monitor;
        }
        locks = Arrays.copyOf(locks, n);
        Arrays.sort(locks, Comparator.comparingLong(m -> m.rank));
        return locked(locks, 0, all, nativeCall);
    }

    /** As {@link #get(Supplier, NativeGuard...)}, for calls without a result. */
    void run(Runnable nativeCall, NativeGuard... others) {
        get(asSupplier(nativeCall), others);
    }

    private static Supplier<Void> asSupplier(Runnable r) {
        return () -> {
            r.run();
            return null;
        };
    }

    private static <T> T locked(Monitor[] locks, int i, NativeGuard[] guards, Supplier<T> nativeCall) {
        if (i < locks.length) {
            synchronized (locks[i]) {
                return locked(locks, i + 1, guards, nativeCall);
            }
        }
        for (NativeGuard g : guards) g.checkOpen();
        return call(nativeCall);
    }

    /** Throws {@link IllegalStateException} if this object or its owner is closed. */
    void checkOpen() {
        if (closed) throw new IllegalStateException("this " + name + " is closed");
        if (owner != null) owner.checkOpen();
    }

    /** True once this object itself was closed (its owner's state does not count). */
    boolean isClosed() {
        return closed;
    }

    /** Frees the peer once; waits for a call in progress. Safe from any thread, any number of times. */
    void close() {
        synchronized (monitor) {
            if (closed) return;
            closed = true;
            release.run();
        }
    }
}
