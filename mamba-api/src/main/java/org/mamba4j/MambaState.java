package org.mamba4j;

import org.mamba4j.nativ.State;

/**
 * The recurrent state of {@link #batch()} independent sequences for one model: per layer the conv
 * history and the SSM state. Rows are independent; a row is {@link #rowSize()} floats that can be read
 * out and written back, so a server can park a sequence and resume it later in any row.
 * Not thread-safe on its own; calls through the owning {@link MambaModel} are serialised by the model.
 */
public final class MambaState implements AutoCloseable {
    private final MambaModel model;
    private final State peer;
    private final int batch;
    private final long rowSize;
    private volatile boolean closed;

    MambaState(MambaModel model, State peer) {
        this.model = model;
        this.peer = peer;
        this.batch = peer.batch();
        this.rowSize = peer.rowSize();
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
        synchronized (model) {
            checkOpen();
            peer.reset();
        }
    }

    /** Zeroes one row. */
    public void resetRow(int row) {
        checkRow(row);
        synchronized (model) {
            checkOpen();
            peer.resetRow(row);
        }
    }

    /** A copy of one row. */
    public float[] readRow(int row) {
        float[] out = new float[rowSize()];
        readRow(row, out);
        return out;
    }

    /** Copies one row into {@code dst} (length {@link #rowSize()}). */
    public void readRow(int row, float[] dst) {
        checkRow(row);
        Checks.length("dst", dst.length, rowSize);
        synchronized (model) {
            checkOpen();
            peer.readRow(row, dst, dst.length);
        }
    }

    /** Overwrites one row from {@code src} (length {@link #rowSize()}), e.g. a row read earlier. */
    public void writeRow(int row, float[] src) {
        checkRow(row);
        Checks.length("src", src.length, rowSize);
        Checks.finite("state row", src);
        synchronized (model) {
            checkOpen();
            peer.writeRow(row, src, src.length);
        }
    }

    /** Copies every row of {@code other}, a state of the same model and batch. */
    public void copyFrom(MambaState other) {
        if (other.model != model || other.batch != batch)
            throw new IllegalArgumentException("copyFrom needs a state of the same model and batch");
        synchronized (model) {
            checkOpen();
            other.checkOpen();
            peer.copyFrom(other.peer);
        }
    }

    /** True once closed. */
    public boolean isClosed() {
        return closed;
    }

    /** Frees the native memory. Idempotent. */
    @Override
    public void close() {
        synchronized (model) {
            if (closed) return;
            closed = true;
            peer.close();
        }
    }

    State peer() {
        checkOpen();
        return peer;
    }

    void checkOpen() {
        if (closed) throw new IllegalStateException("this MambaState is closed");
    }

    private void checkRow(int row) {
        if (row < 0 || row >= batch)
            throw new IndexOutOfBoundsException("row " + row + " is out of range [0, " + batch + ")");
    }

}
