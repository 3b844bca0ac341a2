package org.mamba4j.parallel;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.Phaser;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.mamba4j.Trainer;

/**
 * Ranks that are threads of one process (one thread per replica): collectives hand array references through shared
 * slots between two barriers, so nothing is serialised. This is the CPU form of data-parallel training, its test
 * double for every other transport (the sums are the same {@link Reduction#RANK_ORDER} fold), and — with replicas on
 * several GPUs of one process — a host-staged multi-GPU form (NCCL's {@link NcclCommunicator#group} is faster there).
 *
 * <p>Faults: a rank that does not arrive within the timeout breaks the group — the rank that waited throws
 * {@link CommunicatorException} naming the timeout, the others (waiting or arriving later) throw it naming the
 * broken group; {@link #abort} breaks it at once. A broken group stays broken.
 */
public final class InProcessCommunicator implements Communicator {
    /** Default time a rank waits for the others in one collective. */
    public static final Duration DEFAULT_TIMEOUT = Duration.ofMinutes(5);

    private static final class Group {
        final int world;
        final long timeoutMillis;
        // A phaser, not a CyclicBarrier: breaking must also fail the ranks that arrive later. A CyclicBarrier's reset()
        // only breaks the waiters of the moment and starts a fresh generation, so a rank that had passed the broken
        // check but not yet reached await() waited out the whole timeout (DataParallelTrainerTest, 2026-12-02).
        final Phaser barrier;
        final Object[] slots;
        final String[] ops;
        volatile String broken;  // why, once broken

        Group(int world, Duration timeout) {
            this.world = world;
            this.timeoutMillis = Math.max(1, timeout.toMillis());
            this.barrier = new Phaser(world);
            this.slots = new Object[world];
            this.ops = new String[world];
        }

        synchronized void breakWith(String why) {
            if (broken == null) broken = why;
            barrier.forceTermination();  // waiters are released now, and every later arrival sees it terminated
        }
    }

    private final Group group;
    private final int rank;
    private volatile boolean closed;

    private InProcessCommunicator(Group group, int rank) {
        this.group = group;
        this.rank = rank;
    }

    /** The {@code worldSize} ranks of a new group, rank r at index r, with {@link #DEFAULT_TIMEOUT}. */
    public static List<InProcessCommunicator> group(int worldSize) {
        return group(worldSize, DEFAULT_TIMEOUT);
    }

    /** The ranks of a new group whose collectives wait at most {@code timeout} for every rank. */
    public static List<InProcessCommunicator> group(int worldSize, Duration timeout) {
        if (worldSize < 1) throw new IllegalArgumentException("worldSize = " + worldSize + " must be >= 1");
        Objects.requireNonNull(timeout, "timeout");
        if (timeout.isNegative() || timeout.isZero()) throw new IllegalArgumentException("timeout " + timeout + " must be > 0");
        Group g = new Group(worldSize, timeout);
        List<InProcessCommunicator> ranks = new ArrayList<>();
        for (int r = 0; r < worldSize; r++) ranks.add(new InProcessCommunicator(g, r));
        return Collections.unmodifiableList(ranks);
    }

    @Override
    public int rank() {
        return rank;
    }

    @Override
    public int worldSize() {
        return group.world;
    }

    @Override
    public float[] allGather(float[] values) {
        Objects.requireNonNull(values, "values");
        Object[] all = exchange("allGather(float[" + values.length + "])", values);
        float[] out = new float[values.length * group.world];
        for (int r = 0; r < group.world; r++) System.arraycopy((float[]) all[r], 0, out, r * values.length, values.length);
        return out;
    }

    @Override
    public double[] allGather(double[] values) {
        Objects.requireNonNull(values, "values");
        Object[] all = exchange("allGather(double[" + values.length + "])", values);
        double[] out = new double[values.length * group.world];
        for (int r = 0; r < group.world; r++) System.arraycopy((double[]) all[r], 0, out, r * values.length, values.length);
        return out;
    }

    @Override
    public void broadcast(float[] data, int root) {
        Objects.requireNonNull(data, "data");
        checkRoot(root);
        Object[] all = exchange("broadcast(float[" + data.length + "], root " + root + ")", data);
        if (rank != root) System.arraycopy((float[]) all[root], 0, data, 0, data.length);
    }

    /** The rank-order fold, computed by every rank from the others' arrays directly (no gathered copy). */
    @Override
    public void sumGradients(Trainer replica, Reduction reduction) {
        Objects.requireNonNull(replica, "replica");
        float[] local = replica.gradients();
        Object[] all = exchange("sumGradients(float[" + local.length + "])", local);
        List<float[]> parts = new ArrayList<>();
        for (Object o : all) parts.add((float[]) o);
        replica.setGradients(RankOrderSum.fold(parts));
    }

    @Override
    public void abort(String reason) {
        group.breakWith("rank " + rank + " aborted: " + reason);
    }

    /** Leaves the group; a collective the others start afterwards fails at once instead of waiting for this rank. */
    @Override
    public void close() {
        if (closed) return;
        closed = true;
        if (group.world > 1) group.breakWith("rank " + rank + " closed its communicator");
    }

    /**
     * Deposits this rank's value, waits for every rank, takes a copy of the slots and waits again (so no rank
     * overwrites its slot with the next collective before everyone read this one). Every rank must name the same op.
     */
    private Object[] exchange(String op, Object mine) {
        if (closed) throw new IllegalStateException("rank " + rank + "'s communicator is closed");
        checkBroken();
        group.slots[rank] = mine;
        group.ops[rank] = op;
        await(op);
        Object[] all = group.slots.clone();
        String[] ops = group.ops.clone();
        await(op);
        for (int r = 0; r < group.world; r++)
            if (!op.equals(ops[r])) {
                String why = "collective mismatch: rank " + rank + " called " + op + " while rank " + r + " called " + ops[r]
                        + " (" + Arrays.toString(ops) + ")";
                group.breakWith(why);
                throw new CommunicatorException(why);
            }
        return all;
    }

    private void await(String op) {
        if (group.world == 1) return;
        try {
            final int phase = group.barrier.arrive();
            if (phase < 0 || group.barrier.awaitAdvanceInterruptibly(phase, group.timeoutMillis, TimeUnit.MILLISECONDS) < 0)
                throw new CommunicatorException("rank " + rank + " cannot finish " + op + ": the in-process group is broken ("
                        + (group.broken != null ? group.broken : "another rank timed out") + ")");
        } catch (TimeoutException e) {
            String why = "rank " + rank + " waited " + group.timeoutMillis + " ms in " + op
                    + " for the other ranks of its in-process group: a rank failed or hangs";
            group.breakWith(why);
            throw new CommunicatorException(why);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            group.breakWith("rank " + rank + " was interrupted in " + op);
            throw new CommunicatorException("rank " + rank + " was interrupted in " + op);
        }
    }

    private void checkBroken() {
        String why = group.broken;
        if (why != null) throw new CommunicatorException("rank " + rank + ": the in-process group is broken (" + why + ")");
    }

    private void checkRoot(int root) {
        if (root < 0 || root >= group.world)
            throw new IllegalArgumentException("root = " + root + " must be in [0, " + group.world + ")");
    }

    @Override
    public String toString() {
        return "InProcessCommunicator{rank " + rank + " of " + group.world + "}";
    }
}
