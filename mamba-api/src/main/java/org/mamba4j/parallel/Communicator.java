package org.mamba4j.parallel;

import org.mamba4j.Trainer;

/**
 * One rank's end of a group of {@link #worldSize()} ranks that exchange data: the transport of a
 * {@link DataParallelTrainer}. Every rank makes the same calls in the same order (collectives); a call returns when
 * every rank made it, or throws {@link CommunicatorException} when a rank died, hung past the communicator's timeout,
 * or made a different call — never a silent hang.
 *
 * <p>Implementations: {@link InProcessCommunicator} (ranks are threads of one process, host arrays),
 * {@link TcpCommunicator} (one process per rank, host arrays over TCP through rank 0) and {@link NcclCommunicator}
 * (CUDA device memory over NCCL; one process per GPU or several GPUs of one process).
 */
public interface Communicator extends AutoCloseable {
    /** This rank, in {@code [0, worldSize())}. */
    int rank();

    int worldSize();

    /** {@code result[r·n + i]} = rank r's {@code values[i]}; every rank passes the same length n. */
    float[] allGather(float[] values);

    /** As {@link #allGather(float[])}, for doubles (metadata: losses, counts, flags, fingerprints). */
    double[] allGather(double[] values);

    /** Every rank's {@code data} becomes {@code root}'s (the same length on every rank). */
    void broadcast(float[] data, int root);

    /**
     * Replaces {@code replica}'s accumulated gradient by the sum of every rank's. The default reads the gradient to
     * the host, all-gathers it and adds the ranks in rank order ({@link Reduction#RANK_ORDER}, whatever
     * {@code reduction} says); NCCL works in device memory.
     */
    default void sumGradients(Trainer replica, Reduction reduction) {
        float[] local = replica.gradients();
        replica.setGradients(RankOrderSum.fold(allGather(local), worldSize(), local.length));
    }

    /** Makes this rank's pending and later calls fail, and (where the transport can) the other ranks' too. */
    void abort(String reason);

    /** Frees the transport. Idempotent. */
    @Override
    void close();
}
