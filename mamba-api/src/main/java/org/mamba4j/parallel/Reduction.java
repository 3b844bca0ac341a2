package org.mamba4j.parallel;

/** How {@link Communicator#sumGradients} adds the ranks' gradients. */
public enum Reduction {
    /**
     * Every element is {@code ((g0 + g1) + g2) + …}: the ranks' gradients added in rank order, in f32, after an
     * all-gather, identically on every rank and by every communicator (host fold or the NCCL kernel). The result
     * does not depend on the topology, the world's split into processes, or the communicator — the definition the
     * bit-identity guarantee of {@link DataParallelTrainer} rests on.
     */
    RANK_ORDER,
    /**
     * Whatever order the communicator sums fastest in: {@code ncclAllReduce} for NCCL (≈ 2·(N−1)/N of the gradient
     * sent per rank instead of N−1 for the all-gather, reproducible on one topology but not equal to a rank-order
     * fold). The host communicators have only the rank-order sum, so there it is {@link #RANK_ORDER}.
     */
    FASTEST
}
