package org.mamba4j;

import java.util.Objects;
import org.mamba4j.nativ.Sampler;

/**
 * Token sampling in a language model's device memory for {@link #batch()} rows: each row's settings (temperature,
 * top-k, top-p, min-p, repetition penalty), its random stream and the set of token ids it has seen (the repetition
 * penalty's history). {@link MambaModel#stepTokensSample} and {@link MambaModel#prefillTokensSample} run a step and
 * sample with it, so only token ids cross to the host; on CUDA with graphs on, step and sampling replay as one graph.
 *
 * <p>The rule and its arithmetic are those of {@code org.mamba4j.lm.TokenSampler} (mamba-lm), bit for bit, on the
 * CPU and on CUDA: for the same logits, settings, seed and history, both choose the same token. The random stream
 * is {@link java.util.SplittableRandom}'s (seeded with the row's seed; one {@code nextDouble} per sampled token,
 * none for greedy rows). A row that was never configured is greedy with an empty history. Each sampled id joins its
 * row's history.
 *
 * <p><b>Threads.</b> A sampler belongs to its model: calls are serialised with the model's (one lock). Calls throw
 * {@link IllegalStateException} once the sampler or its model is closed; {@link #close()} is idempotent.
 */
public final class DeviceSampler implements AutoCloseable {
    private final MambaModel model;
    private final Sampler peer;
    private final NativeGuard guard;
    private final int batch;
    private final int vocab;

    /** Wraps a peer just made under the model's lock. */
    DeviceSampler(MambaModel model, Sampler peer) {
        this.model = model;
        this.peer = peer;
        this.guard = model.guard().dependent("DeviceSampler", peer::close);
        this.batch = peer.batch();
        this.vocab = peer.vocab();
        guard.watch(this);
    }

    /** Number of rows. */
    public int batch() {
        return batch;
    }

    /** Logits sampled per row (the first {@code vocab} of each of the model's rows). */
    public int vocab() {
        return vocab;
    }

    /** The model this sampler belongs to. */
    public MambaModel model() {
        return model;
    }

    /**
     * Configures one row and replaces its history.
     *
     * @param temperature finite, {@code >= 0}; 0 is greedy
     * @param topK {@code >= 0}; 0 is off
     * @param topP in {@code (0, 1]}; 1 is off
     * @param minP in {@code [0, 1)}; 0 is off
     * @param repetitionPenalty finite, {@code > 0}; 1 is off (applied in float, as the host sampler does)
     * @param seed the seed of the row's random stream ({@code new SplittableRandom(seed)})
     * @param history the tokens the row has seen so far (prompt and generated), each in {@code [0, vocab)}
     * @throws IllegalArgumentException for a value out of range (naming it)
     */
    public void setRow(int row, double temperature, int topK, double topP, double minP, double repetitionPenalty,
                       long seed, int[] history) {
        checkRow(row);
        Objects.requireNonNull(history, "history");
        guard.run(() -> peer.setRow(row, temperature, topK, topP, minP, repetitionPenalty, seed, history,
                history.length));
    }

    /** The random stream's state of a row: the {@code SplittableRandom} seed field after the row's draws so far. */
    public long randomState(int row) {
        checkRow(row);
        return guard.get(() -> peer.randomState(row));
    }

    /**
     * Samples one token per row from host logits {@code [batch, rowWidth]} ({@code rowWidth >= vocab()}) on the
     * sampler's device, advancing the rows as a sampling step would.
     *
     * @throws MambaException when a row's logits hold NaN or +Infinity, or only -Infinity (the message names the
     *     row and token; the other rows have sampled)
     */
    public int[] sample(float[] logits, int rowWidth) {
        Objects.requireNonNull(logits, "logits");
        if (rowWidth < vocab)
            throw new IllegalArgumentException("rowWidth = " + rowWidth + " must be >= vocab = " + vocab);
        Checks.length("logits", logits.length, (long) batch * rowWidth);
        int[] next = new int[batch];
        guard.run(() -> peer.sample(logits, logits.length, rowWidth, next, next.length));
        return next;
    }

    /** Whether {@link #close()} was called (or the model was closed). */
    public boolean isClosed() {
        return guard.isClosed();
    }

    /** Frees the device memory; idempotent. */
    @Override
    public void close() {
        guard.close();
    }

    Sampler peer() {
        return peer;
    }

    NativeGuard guard() {
        return guard;
    }

    private void checkRow(int row) {
        if (row < 0 || row >= batch)
            throw new IndexOutOfBoundsException("row " + row + " is out of range [0, " + batch + ")");
    }

    @Override
    public String toString() {
        return "DeviceSampler{batch=" + batch + ", vocab=" + vocab + ", device=" + model.device() + '}';
    }
}
