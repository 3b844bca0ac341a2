package org.mamba4j.lm;

import java.util.ArrayDeque;
import java.util.ArrayList;
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
 * other rows are decoding. So a chunk runs here; between two chunks a request's row waits in a one-row parking
 * state, and after the last chunk it is copied into the request's pool slot — every move on the device
 * ({@link MambaState#copyRowFrom}; a row is 25 MB at 2.8b, which a round trip through host memory would copy twice
 * per chunk). The engine takes prompt chunks first come first served, so only a few requests are ever between
 * chunks: parking states are reused and their number stays that small. Scratch states have power-of-two sizes (a group of 7
 * runs as 4 + 2 + 1), so at most {@code 2·maxRows − 1} scratch rows ever exist, allocated on first use.
 */
final class BatchPrefill implements AutoCloseable {
    private final MambaModel model;
    private final int maxRows;                                     // a power of two
    private final Map<Integer, MambaState> scratch = new HashMap<>();  // batch size → state
    private final List<MambaState> parking = new ArrayList<>();        // every parking state made (closed on close)
    private final ArrayDeque<MambaState> freeParking = new ArrayDeque<>();

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
            else s.copyRowFrom(b, r.parked, 0);
            System.arraycopy(r.prompt, r.prefilled, ids, b * length, length);
        }
        float[] logits = new float[B * V];
        model.prefillTokens(s, ids, length, logits);
        for (int b = 0; b < B; b++) {
            ActiveRequest r = rows.get(b);
            r.prefilled += length;
            if (!r.prefillDone()) {
                if (r.parked == null) r.parked = takeParking();
                r.parked.copyRowFrom(0, s, b);
            } else {
                pool.copyRowFrom(r.slot, s, b);
                unpark(r);
                onLast.accept(r, logits, b * V);
            }
        }
    }

    private MambaState takeParking() {
        MambaState p = freeParking.poll();
        if (p == null) {
            p = model.newState(1);
            parking.add(p);
        }
        return p;
    }

    /** Parking states made so far (for tests: they are reused, so this stays small). */
    int parkingStates() {
        return parking.size();
    }

    /** Gives a request's parking state back (after its last chunk, or when it leaves early). */
    void unpark(ActiveRequest r) {
        if (r.parked != null) freeParking.push(r.parked);
        r.parked = null;
    }

    /** Receives the logits of a request's last prompt token: {@code logits[offset, offset + paddedVocab)}. */
    @FunctionalInterface
    interface LastLogits {
        void accept(ActiveRequest r, float[] logits, int offset);
    }

    @Override
    public void close() {
        for (MambaState s : scratch.values()) s.close();
        for (MambaState s : parking) s.close();
        scratch.clear();
        parking.clear();
        freeParking.clear();
    }
}
