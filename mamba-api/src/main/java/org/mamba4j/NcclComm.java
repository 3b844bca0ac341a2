package org.mamba4j;

import java.time.Duration;
import java.util.Objects;
import org.mamba4j.nativ.global.libmamba;

/**
 * One rank of an NCCL communicator on one CUDA device: the native half of
 * {@link org.mamba4j.parallel.NcclCommunicator}, which is what applications use (it adds the rendezvous and the
 * {@link org.mamba4j.parallel.Communicator} contract). libmamba loads {@code libnccl.so.2} at run time, so NCCL is
 * needed only by programs that make one of these.
 *
 * <p>{@link #join} blocks until every rank of the clique joined ({@code ncclCommInitRank}); ranks of one process
 * must join from separate threads. Every collective waits for its result with the timeout given to {@link #join}:
 * past it, or when NCCL reports a peer's failure, the communicator is aborted and the call throws
 * {@link MambaException} naming the rank; an aborted communicator refuses further calls.
 */
public final class NcclComm implements AutoCloseable {
    private final org.mamba4j.nativ.NcclComm peer;
    private final NativeGuard guard;
    private final int rank, worldSize;
    private final Device device;

    private NcclComm(org.mamba4j.nativ.NcclComm peer, int rank, int worldSize, Device device) {
        this.peer = peer;
        this.rank = rank;
        this.worldSize = worldSize;
        this.device = device;
        this.guard = NativeGuard.of("NcclComm", peer::close);
        guard.watch(this);
    }

    /** Why NCCL cannot be used in this process (a CPU-only libmamba, no {@code libnccl.so.2}), or null when it can. */
    public static String unavailableReason() {
        Native.load();
        String why = NativeGuard.call(() -> Native.text(libmamba.ncclUnavailableReason()));
        return why.isEmpty() ? null : why;
    }

    /**
     * A fresh unique id (rank 0 makes it and hands it to every rank).
     *
     * @throws DeviceUnavailableException when NCCL cannot be used here, with {@link #unavailableReason()}
     */
    public static byte[] newUniqueId() {
        requireAvailable();
        byte[] id = new byte[NativeGuard.call(libmamba::ncclUniqueIdSize)];
        NativeGuard.call(() -> {
            libmamba.ncclNewUniqueId(id, id.length);
            return null;
        });
        return id;
    }

    /**
     * Joins the clique of {@code uniqueId} as {@code rank} of {@code worldSize} on a CUDA device.
     *
     * @throws DeviceUnavailableException when NCCL cannot be used here, or the device is not a CUDA device
     */
    public static NcclComm join(byte[] uniqueId, int worldSize, int rank, Device device, Duration timeout) {
        Objects.requireNonNull(uniqueId, "uniqueId");
        Objects.requireNonNull(device, "device");
        Objects.requireNonNull(timeout, "timeout");
        if (!device.isCuda()) throw new DeviceUnavailableException("NCCL needs a CUDA device, not " + device);
        requireAvailable();
        long ms = Math.max(1, timeout.toMillis());
        org.mamba4j.nativ.NcclComm p = NativeGuard.call(
                () -> new org.mamba4j.nativ.NcclComm(uniqueId, uniqueId.length, worldSize, rank, device.code(), ms));
        return new NcclComm(p, rank, worldSize, device);
    }

    public int rank() { return rank; }
    public int worldSize() { return worldSize; }
    public Device device() { return device; }

    /**
     * Replaces {@code trainer}'s accumulated gradient (a trainer on this rank's device) by its sum over the ranks, in
     * device memory. {@code rankOrder}: all-gather, then ((g0 + g1) + g2) + … per element on every rank (bitwise the
     * host fold of the CPU communicators); otherwise one {@code ncclAllReduce} (NCCL's order, less traffic).
     */
    public void sumGradients(Trainer trainer, boolean rankOrder) {
        Objects.requireNonNull(trainer, "trainer");
        guard.run(() -> peer.sumGradients(trainer.peer(), rankOrder), trainer.guard());
    }

    /** {@code result[r·n + i]} = rank r's {@code values[i]} (small arrays: staged through device memory). */
    public double[] allGather(double[] values) {
        Objects.requireNonNull(values, "values");
        double[] all = new double[values.length * worldSize];
        guard.run(() -> peer.allGather(values, values.length, all, all.length));
        return all;
    }

    /** Every rank's {@code data} becomes {@code root}'s (the same length on every rank). */
    public void broadcast(float[] data, int root) {
        Objects.requireNonNull(data, "data");
        guard.run(() -> peer.broadcast(data, data.length, root));
    }

    /** Aborts the communicator ({@code ncclCommAbort}); later calls fail. */
    public void abort() {
        guard.run(peer::abort);
    }

    /** Frees the communicator ({@code ncclCommDestroy}, or nothing more after an abort). Idempotent. */
    @Override
    public void close() {
        guard.close();
    }

    private static void requireAvailable() {
        String why = unavailableReason();
        if (why != null) throw new DeviceUnavailableException(why);
    }
}
