package org.mamba4j;

import java.util.Objects;
import org.mamba4j.nativ.State;

/**
 * The recurrent state of {@link #batch()} independent sequences for one model: per layer the conv
 * history and the SSM state. Rows are independent; a row is {@link #rowSize()} floats that can be read
 * out and written back, so a server can park a sequence and resume it later in any row.
 *
 * <p><b>Threads.</b> A state belongs to its model: its calls are serialised with the model's (one lock), so
 * threads may share a model as long as each uses its own state (two threads stepping ONE state advance it in
 * whatever order their calls arrive). Every row operation completes before it returns. Every row
 * operation throws {@link IllegalStateException} once the state <em>or its model</em> is closed. Closing a
 * state after its model still frees its memory. {@link #close()} is idempotent and thread-safe.
 */
public final class MambaState implements AutoCloseable {
    private final MambaModel model;
    private final State peer;
    private final NativeGuard guard;
    private final int batch;
    private final long rowSize;

    /** Wraps a peer just made under the model's lock. */
    MambaState(MambaModel model, State peer) {
        this.model = model;
        this.peer = peer;
        this.guard = model.guard().dependent("MambaState", peer::close);
        this.batch = peer.batch();
        this.rowSize = peer.rowSize();
        guard.watch(this);
    }

    /** Number of sequences (rows). */
    public int batch() {
        return batch;
    }

    /** Floats in one row. */
    public int rowSize() {
        return Math.toIntExact(rowSize);
    }

    /** The model this state belongs to. */
    public MambaModel model() {
        return model;
    }

    /** Zeroes every row (a fresh start for all sequences). */
    public void reset() {
        guard.run(peer::reset);
    }

    /** Zeroes one row. */
    public void resetRow(int row) {
        checkRow(row);
        guard.run(() -> peer.resetRow(row));
    }

    /** A copy of one row. */
    public float[] readRow(int row) {
        checkRow(row);
        float[] out = new float[rowSize()];
        readRow(row, out);
        return out;
    }

    /** Copies one row into {@code dst} (length {@link #rowSize()}). */
    public void readRow(int row, float[] dst) {
        checkRow(row);
        Objects.requireNonNull(dst, "dst");
        Checks.length("dst", dst.length, rowSize);
        guard.run(() -> peer.readRow(row, dst, dst.length));
    }

    /** Overwrites one row from {@code src} (length {@link #rowSize()}), e.g. a row read earlier. */
    public void writeRow(int row, float[] src) {
        checkRow(row);
        Objects.requireNonNull(src, "src");
        Checks.length("src", src.length, rowSize);
        Checks.finite("state row", src);
        guard.run(() -> peer.writeRow(row, src, src.length));
    }

    /** Copies every row of {@code other}, a state of the same model and batch. */
    public void copyFrom(MambaState other) {
        Objects.requireNonNull(other, "other");
        if (other.model != model || other.batch != batch)
            throw new IllegalArgumentException("copyFrom needs a state of the same model and batch");
        guard.run(() -> peer.copyFrom(other.peer), other.guard);
    }

    /**
     * Overwrites row {@code row} with row {@code srcRow} of {@code src}, a state of the same model (any batch; this
     * state itself too), without leaving the device: what a server does to move a prefilled sequence into a decode
     * slot ({@link #readRow}/{@link #writeRow} go through host memory).
     *
     * <pre>{@code
     * try (MambaState scratch = model.newState(1)) {
     *     model.prefillTokens(scratch, prompt, prompt.length, logits);
     *     pool.copyRowFrom(slot, scratch, 0);
     * }
     * }</pre>
     */
    public void copyRowFrom(int row, MambaState src, int srcRow) {
        Objects.requireNonNull(src, "src");
        if (src.model != model) throw new IllegalArgumentException("copyRowFrom needs a state of the same model");
        checkRow(row);
        src.checkRow(srcRow);
        guard.run(() -> peer.copyRowFrom(row, src.peer, srcRow), src.guard);
    }

    /** True once this state was closed (see {@link #close()}; a closed model does not count). */
    public boolean isClosed() {
        return guard.isClosed();
    }

    /**
     * Frees the native memory; waits for a call in progress. Idempotent, also after the model was closed.
     * Required: a state dropped without it is freed only after a garbage collection, at no predictable time.
     */
    @Override
    public void close() {
        guard.close();
    }

    /** The peer, for native calls made under {@link #guard()}. */
    State peer() {
        guard.checkOpen();
        return peer;
    }

    /** This state's guard: it shares the model's lock and is closed with the model. */
    NativeGuard guard() {
        return guard;
    }

    private void checkRow(int row) {
        if (row < 0 || row >= batch)
            throw new IndexOutOfBoundsException("row " + row + " is out of range [0, " + batch + ")");
    }
}
