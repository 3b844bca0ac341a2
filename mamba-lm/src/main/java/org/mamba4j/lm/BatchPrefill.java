package org.mamba4j.lm;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.mamba4j.MambaModel;
import org.mamba4j.MambaState;

/**
 * Runs one prompt chunk of the same length for several {@link Generator} requests in one {@code prefillTokens}
 * call, in a scratch state of exactly that many rows, and carries each request's state row between its chunks.
 *
 * <p>Why a scratch state and not the pool: {@code prefillTokens} advances every row of a state, while the pool's
 * other rows are decoding. So a chunk runs here, its rows are parked on the host between chunks, and after the
 * last chunk the row is copied into the request's pool slot on the device ({@link MambaState#copyRowFrom}). Scratch states have power-of-two sizes (a group of 7
 * runs as 4 + 2 + 1), so at most {@code 2·maxRows − 1} scratch rows ever exist, allocated on first use.
 */
final class BatchPrefill implements AutoCloseable {
    private final MambaModel model;
    private final int maxRows;                                     // a power of two
    private final Map<Integer, MambaState> scratch = new HashMap<>();  // batch size → state

    BatchPrefill(MambaModel model, int maxRows) {
        this.model = model;
        this.maxRows = Integer.highestOneBit(maxRows);
    }

    /**
     * Prefills {@code length} more prompt tokens of every request (each has at least that many left), updating
     * {@code prefilled} and {@code parked}; for a request whose prompt is now consumed, its state row is written
     * into {@code pool} at its slot and {@code onLast} gets the logits of its last prompt token.
     */
    void run(List<ActiveRequest> group, int length, MambaState pool, LastLogits onLast) {
        for (int from = 0; from < group.size(); ) {
            int n = Math.min(maxRows, Integer.highestOneBit(group.size() - from));
            runRows(group.subList(from, from + n), length, pool, onLast);
            from += n;
        }
    }

    private void runRows(List<ActiveRequest> rows, int length, MambaState pool, LastLogits onLast) {
        int B = rows.size(), V = model.vocabSize();
        MambaState s = scratch.computeIfAbsent(B, model::newState);
        int[] ids = new int[B * length];
        for (int b = 0; b < B; b++) {
            ActiveRequest r = rows.get(b);
            if (r.parked == null) s.resetRow(b);
            else s.writeRow(b, r.parked);
            System.arraycopy(r.prompt, r.prefilled, ids, b * length, length);
        }
        float[] logits = new float[B * V];
        model.prefillTokens(s, ids, length, logits);
        for (int b = 0; b < B; b++) {
            ActiveRequest r = rows.get(b);
            r.prefilled += length;
            if (!r.prefillDone()) {
                if (r.parked == null) r.parked = new float[s.rowSize()];
                s.readRow(b, r.parked);
            } else {
                pool.copyRowFrom(r.slot, s, b);  // on the device
                r.parked = null;
                onLast.accept(r, logits, b * V);
            }
        }
    }

    /** Receives the logits of a request's last prompt token: {@code logits[offset, offset + paddedVocab)}. */
    @FunctionalInterface
    interface LastLogits {
        void accept(ActiveRequest r, float[] logits, int offset);
    }

    @Override
    public void close() {
        for (MambaState s : scratch.values()) s.close();
        scratch.clear();
    }
}
