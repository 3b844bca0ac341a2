package org.mamba4j;

import java.lang.ref.Cleaner;
import java.util.Arrays;
import java.util.Comparator;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;
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
 *
 * <p><b>Release order.</b> libmamba's trainer uses its model until it is destroyed, so a dependent made with
 * {@code pinsOwner} keeps its owner's peer alive: closing the model makes it unusable at once, but its memory
 * is freed when the last such dependent is closed too (before, closing a model and then its trainer freed the
 * trainer into freed memory).
 *
 * <p><b>Safety net.</b> An object that becomes unreachable without {@link #close()} is closed by a
 * {@link Cleaner}, in the same order. That frees memory only after a garbage collection, at no predictable
 * time, so {@code close()} is still required; the net keeps a forgotten object from leaking for the life
 * of the process.
 */
final class NativeGuard {
    private static final AtomicLong SEQUENCE = new AtomicLong();
    private static final Cleaner CLEANER = Cleaner.create();
    /** Peers freed, and objects the Cleaner closed (dropped without close): for tests that watch the safety net. */
    private static final AtomicLong RELEASED = new AtomicLong(), COLLECTED = new AtomicLong();

    /** A lock with a global rank, so that several are always taken in the same order. */
    private static final class Monitor {
        final long rank = SEQUENCE.incrementAndGet();
    }

    private final String name;
    private final Monitor monitor;
    private final NativeGuard owner;
    private final boolean pinsOwner;
    private final Runnable release;
    private volatile boolean closed;
    private boolean released;  // the peer is freed (under the monitor)
    private int pins;          // open dependents that need this peer alive (under the monitor)
    private Cleaner.Cleanable cleanable;

    private NativeGuard(String name, Monitor monitor, NativeGuard owner, boolean pinsOwner, Runnable release) {
        this.name = name;
        this.monitor = monitor;
        this.owner = owner;
        this.pinsOwner = pinsOwner;
        this.release = Objects.requireNonNull(release, "release");
    }

    /** A guard with its own lock, for an independent object; {@code release} frees the peer on close. */
    static NativeGuard of(String name, Runnable release) {
        return new NativeGuard(name, new Monitor(), null, false, release);
    }

    /**
     * A guard for an object that belongs to this one (a state of a model): it shares the lock, and is
     * unusable once either is closed. Closing the owner does not free it; closing it still does. Call it under
     * this guard's lock (inside {@link #get}), so the owner cannot be closed between making the peer and this.
     */
    NativeGuard dependent(String name, Runnable release) {
        return dependent(name, release, false);
    }

    private NativeGuard dependent(String name, Runnable release, boolean pinsOwner) {
        synchronized (monitor) {
            checkOpen();
            if (pinsOwner) pins++;
            return new NativeGuard(name, monitor, this, pinsOwner, release);
        }
    }

    /** A peer made under an owner's lock, with its guard. */
    record Guarded<P>(P peer, NativeGuard guard) {}

    /**
     * Makes a dependent peer that uses this guard's peer until it is freed (a model's trainer): made under the
     * lock, and this peer is not freed before it, whatever the order of the two closes.
     */
    <P> Guarded<P> newPinningDependent(String name, Supplier<P> make, Function<P, Runnable> release) {
        synchronized (monitor) {
            P peer = get(make);
            return new Guarded<>(peer, dependent(name, release.apply(peer), true));
        }
    }

    /**
     * Registers the safety net: once {@code user} (the public object that owns this guard, which this guard
     * must not reference) is unreachable and not closed, the Cleaner closes this guard.
     */
    void watch(Object user) {
        cleanable = CLEANER.register(user, this::collect);
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

    /** Frees the peer once (or lets its last pinning dependent do it); waits for a call in progress. Safe from any thread, any number of times. */
    void close() {
        synchronized (monitor) {
            if (closed) return;
            closed = true;
            releaseUnlessPinned();
        }
        Cleaner.Cleanable c = cleanable;
        if (c != null) c.clean();  // unregisters; collect() finds the guard closed
    }

    /** The Cleaner's action: closes an object its user dropped without closing it. */
    private void collect() {
        synchronized (monitor) {
            if (closed) return;
            closed = true;
            COLLECTED.incrementAndGet();
            releaseUnlessPinned();
        }
    }

    private void releaseUnlessPinned() {
        if (pins == 0) releaseNow();
    }

    private void releaseNow() {
        if (released) return;
        released = true;
        try {
            release.run();
        } finally {
            RELEASED.incrementAndGet();
            if (pinsOwner && --owner.pins == 0 && owner.closed) owner.releaseNow();
        }
    }

    /** Whether the peer is freed (a closed owner stays unfreed while a pinning dependent is open). */
    boolean isReleased() {
        synchronized (monitor) {
            return released;
        }
    }

    /** Peers freed so far in this process (by close or by the Cleaner). */
    static long releasedCount() {
        return RELEASED.get();
    }

    /** Objects the Cleaner closed because they were dropped without {@code close()}. */
    static long collectedCount() {
        return COLLECTED.get();
    }
}
