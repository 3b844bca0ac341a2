package org.mamba4j.parallel;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.mamba4j.Device;
import org.mamba4j.DeviceUnavailableException;
import org.mamba4j.MambaException;
import org.mamba4j.NcclComm;
import org.mamba4j.Trainer;

/**
 * Ranks on CUDA devices over NCCL ({@code libnccl.so.2}, loaded by libmamba at run time): gradients are summed in the
 * replicas' own device buffers — {@link Reduction#RANK_ORDER} as an {@code ncclAllGather} in buckets of at most
 * 256 MiB followed by one fixed-order add kernel, {@link Reduction#FASTEST} as one {@code ncclAllReduce}. Two forms:
 * {@link #connect} (one process per GPU, bootstrapped by a {@link TcpCommunicator} rendezvous that hands rank 0's
 * NCCL unique id to every rank) and {@link #group} (several GPUs of one process, one thread per device).
 *
 * <p>Faults: every collective waits with the timeout; past it, or when NCCL reports a failed peer, the NCCL
 * communicator is aborted and the call throws {@link CommunicatorException}. Joining ({@code ncclCommInitRank})
 * runs on a daemon thread with the same timeout, so a rank that never joins fails the others with an exception (the
 * stuck NCCL thread is left behind; the process should exit).
 *
 * <p>Without CUDA in this libmamba, or without {@code libnccl.so.2}, {@link #connect} and {@link #group} throw
 * {@link DeviceUnavailableException} saying which ({@link #unavailableReason()}).
 */
public final class NcclCommunicator implements Communicator {
    /** The bootstrap accepts a unique id of at most this many bytes (NCCL's are 128; libmamba checks the exact size). */
    private static final int MAX_UNIQUE_ID_BYTES = 4096;

    private final NcclComm comm;

    private NcclCommunicator(NcclComm comm) {
        this.comm = comm;
    }

    /** Why NCCL cannot be used in this process, or null when it can. */
    public static String unavailableReason() {
        return NcclComm.unavailableReason();
    }

    /**
     * One process per GPU: the rendezvous of {@code config} (e.g. {@link LaunchConfig#fromEnvironment()}), rank 0's
     * unique id to every rank, then this rank joins NCCL on {@code device} (usually {@link LaunchConfig#localDevice()}).
     */
    public static NcclCommunicator connect(LaunchConfig config, Device device) {
        Objects.requireNonNull(config, "config");
        Objects.requireNonNull(device, "device");
        requireAvailable(device);  // before the rendezvous: the message names NCCL, not a timeout
        byte[] id;
        try (TcpCommunicator bootstrap = TcpCommunicator.connect(config)) {
            id = bootstrap.broadcastBytes(config.rank() == 0 ? NcclComm.newUniqueId() : new byte[0], 0, MAX_UNIQUE_ID_BYTES);
        }
        final byte[] uid = id;
        return joinWithin(config.timeout(), List.of(() -> NcclComm.join(uid, config.worldSize(), config.rank(), device,
                config.timeout()))).get(0);
    }

    /** Several GPUs of one process: rank r on {@code devices.get(r)}, joined on one thread per device. */
    public static List<NcclCommunicator> group(List<Device> devices, Duration timeout) {
        Objects.requireNonNull(devices, "devices");
        Objects.requireNonNull(timeout, "timeout");
        if (devices.isEmpty()) throw new IllegalArgumentException("no devices");
        for (Device d : devices) requireAvailable(d);
        byte[] id = NcclComm.newUniqueId();
        List<java.util.function.Supplier<NcclComm>> joins = new ArrayList<>();
        for (int r = 0; r < devices.size(); r++) {
            int rank = r;
            joins.add(() -> NcclComm.join(id, devices.size(), rank, devices.get(rank), timeout));
        }
        return Collections.unmodifiableList(joinWithin(timeout, joins));
    }

    /** Runs each join on its own daemon thread (NCCL's init blocks until all ranks joined) and waits within the timeout. */
    private static List<NcclCommunicator> joinWithin(Duration timeout, List<java.util.function.Supplier<NcclComm>> joins) {
        ExecutorService pool = Executors.newFixedThreadPool(joins.size(), r -> {
            Thread t = new Thread(r, "mamba4j-nccl-init");
            t.setDaemon(true);
            return t;
        });
        List<Future<NcclComm>> futures = new ArrayList<>();
        for (java.util.function.Supplier<NcclComm> j : joins) futures.add(pool.submit(j::get));
        pool.shutdown();
        long deadline = System.nanoTime() + timeout.toNanos();
        List<NcclCommunicator> done = new ArrayList<>();
        try {
            for (Future<NcclComm> f : futures)
                done.add(new NcclCommunicator(f.get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS)));
            return done;
        } catch (TimeoutException e) {
            done.forEach(NcclCommunicator::close);
            throw new CommunicatorException("ncclCommInitRank did not finish within " + timeout.toMillis()
                    + " ms: a rank did not join (its NCCL init thread is left blocked; exit the process)");
        } catch (ExecutionException e) {
            done.forEach(NcclCommunicator::close);
            Throwable c = e.getCause();
            if (c instanceof MambaException m) throw m;
            throw new CommunicatorException("joining NCCL failed: " + c, c);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new CommunicatorException("interrupted while joining NCCL");
        }
    }

    private static void requireAvailable(Device device) {
        if (!device.isCuda()) throw new DeviceUnavailableException("NCCL needs a CUDA device, not " + device);
        String why = NcclComm.unavailableReason();
        if (why != null) throw new DeviceUnavailableException(why);
    }

    @Override
    public int rank() {
        return comm.rank();
    }

    @Override
    public int worldSize() {
        return comm.worldSize();
    }

    public Device device() {
        return comm.device();
    }

    /** Via {@link #allGather(double[])}: floats widen to doubles exactly and come back bit for bit (small arrays). */
    @Override
    public float[] allGather(float[] values) {
        double[] d = new double[values.length];
        for (int i = 0; i < d.length; i++) d[i] = values[i];
        double[] all = allGather(d);
        float[] out = new float[all.length];
        for (int i = 0; i < out.length; i++) out[i] = (float) all[i];
        return out;
    }

    @Override
    public double[] allGather(double[] values) {
        return translated(() -> comm.allGather(values));
    }

    @Override
    public void broadcast(float[] data, int root) {
        translated(() -> {
            comm.broadcast(data, root);
            return null;
        });
    }

    /** In device memory: the replica must be on this rank's device. */
    @Override
    public void sumGradients(Trainer replica, Reduction reduction) {
        Objects.requireNonNull(replica, "replica");
        Objects.requireNonNull(reduction, "reduction");
        translated(() -> {
            comm.sumGradients(replica, reduction == Reduction.RANK_ORDER);
            return null;
        });
    }

    @Override
    public void abort(String reason) {
        comm.abort();
    }

    @Override
    public void close() {
        comm.close();
    }

    /** A native failure of a collective (a timeout, a peer's error) is a {@link CommunicatorException}. */
    private <T> T translated(java.util.function.Supplier<T> call) {
        try {
            return call.get();
        } catch (IllegalArgumentException | IllegalStateException e) {
            throw e;
        } catch (MambaException e) {
            throw new CommunicatorException("NCCL rank " + rank() + ": " + e.getMessage(), e);
        }
    }

    @Override
    public String toString() {
        return "NcclCommunicator{rank " + rank() + " of " + worldSize() + " on " + device() + "}";
    }
}
