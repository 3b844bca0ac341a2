package org.mamba4j.lm;

import java.util.Arrays;
import java.util.Objects;
import org.mamba4j.MambaException;

/**
 * Chooses the next token of one sequence from its logits, following a {@link Sampling}.
 *
 * <p>Use one sampler per generated sequence: each owns its random stream, so the rows of a batch
 * sample independently and a row gives the same tokens as generating that sequence alone with a
 * sampler built the same way. The stream is {@link java.util.SplittableRandom}'s (SplitMix64, fixed by the
 * Java specification, reimplemented here so that its state can be handed to the device: {@link #randomState()}),
 * and the arithmetic is exact IEEE-754 in a fixed order with no library functions, so a seed gives the same tokens
 * on every JVM and platform <em>and</em> in libmamba's native sampler (CPU and CUDA, {@link
 * org.mamba4j.DeviceSampler}), which follows the same rule with the same bits. Greedy steps draw nothing; every
 * sampled step draws exactly one {@code double}.
 *
 * <h2>Order of operations</h2>
 *
 * The same as the logits processors and warpers of HuggingFace transformers' {@code generate}:
 *
 * <ol>
 *   <li>Repetition penalty over the distinct tokens of {@code history}: a logit {@code < 0} is
 *       multiplied by the penalty, any other divided by it (float arithmetic, like PyTorch).
 *   <li>Temperature 0: return the argmax (ties go to the lowest id). Nothing below happens.
 *   <li>Temperature: the weight of a token is {@code exp64((l - max) / T)} in double, which never overflows and
 *       ranks tokens exactly as {@code l / T} would; {@code exp64} is e<sup>d</sup> from + − × only (Cody–Waite
 *       reduction, degree-13 Taylor polynomial, relative error below 4e-16; 0 below d = −708), evaluated in the
 *       same order by every implementation.
 *   <li>Top-k: keep the {@code k} largest logits; tokens tied with the k-th are kept as well.
 *   <li>Top-p: order the kept tokens by logit (descending), ties by id (ascending); add {@code weight / norm} one
 *       token at a time in that order, where {@code norm} is the sum of the kept weights; the token at which the
 *       running sum first reaches {@code p} is the last one kept (it may split a group of tied logits, the lower ids
 *       staying). The most probable token is always kept. If rounding keeps the sum below {@code p}, all stay.
 *   <li>Min-p: drop tokens whose weight is below {@code minP} times the largest weight (which is 1).
 *   <li>Draw {@code u = nextDouble() · total} and descend the tree of sums (below) to the token.
 * </ol>
 *
 * <p><b>Sums.</b> Every sum over tokens ({@code norm}, {@code total}) is the pairwise tree over token ids: the
 * weights zero-padded to a power of two, each node the sum of its two children (tiles of 1024 ids, then a tree over
 * the tiles — the same tree). The draw descends it from the root with {@code acc = 0}: at a node whose children
 * hold {@code L} and {@code R}, it goes right (adding {@code L} to {@code acc}) exactly when {@code R > 0} and
 * ({@code L == 0} or {@code u >= acc + L}); the leaf reached is the token. A parallel device computes exactly these
 * sums, so it reaches the same leaf.
 *
 * <p>Cost: O(V) when top-k and top-p are off; otherwise the candidates are sorted by a primitive
 * sort of packed {@code long} keys (no boxing), first only the tokens within a factor 1e-4 of the most
 * likely one, widening only when that set cannot decide the result (it is always a prefix of the full order, so
 * the result is the same), so O(V log V) at worst. Scratch arrays are allocated on first use (and again only if a
 * larger vocabulary shows up) and reused afterwards; the logits passed in are never modified.
 *
 * <p>Logits that are NaN or +Infinity throw {@link MambaException} (the lowest such token is named); -Infinity
 * marks a banned token.
 *
 * <p>Not thread-safe: one sampler belongs to one sequence on one thread at a time.
 */
public final class TokenSampler {

    /** Leaves per tile of the pairwise tree (libmamba's sampling::kTile). */
    static final int TILE = 1024;
    /** Ratios to the most likely token's weight that bound the candidate tiers tried before sorting everything. */
    private static final double[] CUTS = {1e-4, 1e-12};
    private static final long GOLDEN_GAMMA = 0x9e3779b97f4a7c15L;

    private final Sampling sampling;
    private final long seed;
    private long state;  // SplittableRandom's seed field

    private float[] work = new float[0];
    private double[] weight = new double[0];
    private double[] kept = new double[0];
    private long[] order = new long[0];
    private float[] heap = new float[0];
    private double[] top = new double[0];
    private final double[] tile = new double[2 * TILE];
    private int[] seen = new int[0];
    private int stamp;

    /** A sampler whose random stream is seeded from {@link Sampling#seed()}. */
    public TokenSampler(Sampling sampling) {
        this(sampling, Objects.requireNonNull(sampling, "sampling").seed());
    }

    /**
     * A sampler with an explicit seed, for example {@link #rowSeed(long, int)} for row {@code i} of a
     * batch. Passing {@code sampling.seed()} to every row makes each row identical to generating it
     * alone; passing a per-row seed makes identical prompts diverge.
     */
    public TokenSampler(Sampling sampling, long seed) {
        this.sampling = Objects.requireNonNull(sampling, "sampling");
        this.seed = seed;
        this.state = seed;
    }

    /**
     * A well-mixed seed for row {@code row} of a batch generated with base seed {@code seed}: distinct
     * rows get unrelated streams, and the result is the same on every JVM.
     */
    public static long rowSeed(long seed, int row) {
        return mix64(seed + 0x9E3779B97F4A7C15L * (row + 1L));
    }

    private static long mix64(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /** {@code SplittableRandom.nextDouble()}: the same stream as {@code new SplittableRandom(seed)}. */
    private double nextDouble() {
        state += GOLDEN_GAMMA;
        return (mix64(state) >>> 11) * 0x1.0p-53;
    }

    /**
     * The random stream's state: SplittableRandom's seed field, {@code seed + draws · 0x9e3779b97f4a7c15}. A
     * {@link org.mamba4j.DeviceSampler} row with this state continues the stream.
     */
    public long randomState() {
        return state;
    }

    /** The settings this sampler follows. */
    public Sampling sampling() {
        return sampling;
    }

    /** The seed of this sampler's random stream. */
    public long seed() {
        return seed;
    }

    /** {@link #next(float[], int, int, int[], int)} for a logits array holding exactly one row. */
    public int next(float[] logits, int[] history, int historyLength) {
        Objects.requireNonNull(logits, "logits");
        return next(logits, 0, logits.length, history, historyLength);
    }

    /**
     * Picks the next token.
     *
     * @param logits holds this sequence's logits at {@code [offset, offset + vocab)}; not modified
     * @param offset first logit of this sequence
     * @param vocab number of logits (the model's padded vocabulary)
     * @param history the tokens of the sequence so far (prompt and generated), for the repetition
     *     penalty; may be {@code null} when {@code historyLength} is 0
     * @param historyLength how many leading entries of {@code history} are valid
     * @return a token id in {@code [0, vocab)}
     * @throws MambaException when a logit is NaN or +Infinity, or every logit is -Infinity
     * @throws IllegalArgumentException when the ranges are inconsistent or a history id is outside
     *     {@code [0, vocab)}
     */
    public int next(float[] logits, int offset, int vocab, int[] history, int historyLength) {
        Objects.requireNonNull(logits, "logits");
        if (vocab < 1 || offset < 0 || offset > logits.length - vocab) {
            throw new IllegalArgumentException(
                    "logits range [" + offset + ", " + offset + " + " + vocab + ") does not fit an array of "
                            + logits.length);
        }
        int historyCapacity = history == null ? 0 : history.length;
        if (historyLength < 0 || historyLength > historyCapacity) {
            throw new IllegalArgumentException(
                    "historyLength " + historyLength + " is outside [0, " + historyCapacity + "]");
        }
        ensureCapacity(vocab);

        float[] w = work;
        for (int i = 0; i < vocab; i++) {
            float x = logits[offset + i];
            if (x != x) {
                throw new MambaException(
                        "logit of token " + i + " is NaN (logits at offset " + offset
                                + "): the model produced non-finite activations");
            }
            if (x == Float.POSITIVE_INFINITY) {
                throw new MambaException(
                        "logit of token " + i + " is +Infinity (logits at offset " + offset
                                + "): the model overflowed");
            }
            w[i] = x;
        }

        double penalty = sampling.repetitionPenalty();
        if (penalty != 1.0 && historyLength > 0) {
            applyRepetitionPenalty(w, vocab, history, historyLength, (float) penalty);
        }

        int best = -1;
        float bestValue = Float.NEGATIVE_INFINITY;
        int finite = 0;
        for (int i = 0; i < vocab; i++) {
            float x = w[i];
            if (x > Float.NEGATIVE_INFINITY) {
                finite++;
                if (x > bestValue) {
                    bestValue = x;
                    best = i;
                }
            }
        }
        if (best < 0) {
            throw new MambaException(
                    "every one of the " + vocab + " logits is -Infinity: no token can be chosen");
        }
        if (sampling.isGreedy()) {
            return best;
        }

        double temperature = sampling.temperature();
        double[] p = weight;
        exp64Weights(w, vocab, bestValue, temperature, p);

        int topK = sampling.topK();
        double topP = sampling.topP();
        boolean kActive = topK > 0 && topK < finite;
        double[] q = p;
        if (kActive) {
            q = keepTopK(w, p, vocab, topK, topP);
        } else if (topP < 1.0) {
            q = keepNucleus(w, p, vocab, bestValue, temperature, topP);
        }
        double minP = sampling.minP();
        if (minP > 0.0) {
            for (int i = 0; i < vocab; i++) {
                if (q[i] < minP) {
                    q[i] = 0.0;
                }
            }
        }
        return draw(q, vocab);
    }

    /**
     * Top-k (and top-p within it): the weights of the kept tokens (others 0), in {@code kept}. The top-k set is every
     * finite token with a logit at least the k-th largest (its ties included): one pass with a k-entry heap finds that
     * logit, and only the set is sorted (a near-flat row — random weights, high temperature — has every token in the
     * first candidate tier).
     */
    private double[] keepTopK(float[] w, double[] p, int vocab, int topK, double topP) {
        long[] keys = keys(vocab);
        double[] q = kept;
        float kth = kthLargest(w, vocab, topK);
        int n = 0;
        for (int i = 0; i < vocab; i++) {
            if (w[i] > Float.NEGATIVE_INFINITY && w[i] >= kth) {
                keys[n++] = packDescending(w[i], i);
            }
        }
        Arrays.sort(keys, 0, n);
        int keep = n;
        if (topP < 1.0) {
            for (int i = 0; i < vocab; i++) {
                q[i] = w[i] < kth ? 0.0 : p[i];
            }
            double norm = treeSum(q, vocab);
            double cumulative = 0.0;
            for (int j = 0; j < keep; j++) {
                cumulative += p[(int) keys[j]] / norm;
                if (cumulative >= topP) {
                    keep = j + 1;
                    break;
                }
            }
        }
        return keepOnly(keys, keep, p, q, vocab);
    }

    /**
     * Top-p alone: the weights of the nucleus (others 0), in {@code kept}. Tiers of candidates (every finite token
     * with a logit at least the tier's cut value) are prefixes of the full order, so the first tier that holds the
     * nucleus gives the result sorting every token would.
     */
    private double[] keepNucleus(float[] w, double[] p, int vocab, float max, double temperature, double topP) {
        long[] keys = keys(vocab);
        double norm = treeSum(p, vocab);
        for (int tier = 0; tier <= CUTS.length; tier++) {
            float cutValue = tier < CUTS.length ? (float) (max + temperature * Math.log(CUTS[tier])) : Float.NEGATIVE_INFINITY;
            int n = 0;
            int positiveOutside = 0;
            for (int i = 0; i < vocab; i++) {
                if (!(w[i] > Float.NEGATIVE_INFINITY)) {
                    continue;
                }
                if (w[i] >= cutValue) {
                    keys[n++] = packDescending(w[i], i);
                } else if (p[i] > 0.0) {
                    positiveOutside++;
                }
            }
            Arrays.sort(keys, 0, n);
            int keep = n;
            double cumulative = 0.0;
            boolean reached = false;
            for (int j = 0; j < keep; j++) {
                cumulative += p[(int) keys[j]] / norm;
                if (cumulative >= topP) {
                    keep = j + 1;
                    reached = true;
                    break;
                }
            }
            if (!reached && positiveOutside > 0 && tier < CUTS.length) {
                continue; // the nucleus reaches below this tier
            }
            return keepOnly(keys, keep, p, kept, vocab);
        }
        throw new AssertionError("the last tier holds every finite logit");
    }

    /** The sort-key buffer, grown to {@code vocab}. */
    private long[] keys(int vocab) {
        if (order.length < vocab) {
            order = new long[vocab];
        }
        return order;
    }

    /** The final weights in q: p on the first {@code keep} sorted keys, 0 elsewhere. */
    private static double[] keepOnly(long[] keys, int keep, double[] p, double[] q, int vocab) {
        Arrays.fill(q, 0, vocab, 0.0);
        for (int j = 0; j < keep; j++) {
            int id = (int) keys[j];
            q[id] = p[id];
        }
        return q;
    }

    /** The k-th largest finite value of w[0, vocab) (1 <= k < their count): a min-heap of the k largest so far. */
    private float kthLargest(float[] w, int vocab, int k) {
        if (heap.length < k) {
            heap = new float[k];
        }
        float[] h = heap;
        int size = 0;
        for (int i = 0; i < vocab; i++) {
            float v = w[i];
            if (!(v > Float.NEGATIVE_INFINITY)) {
                continue;
            }
            if (size < k) {
                int j = size++;
                while (j > 0) {
                    int parent = (j - 1) >> 1;
                    if (h[parent] <= v) {
                        break;
                    }
                    h[j] = h[parent];
                    j = parent;
                }
                h[j] = v;
            } else if (v > h[0]) {
                int j = 0;
                while (true) {
                    int c = 2 * j + 1;
                    if (c >= k) {
                        break;
                    }
                    if (c + 1 < k && h[c + 1] < h[c]) {
                        c++;
                    }
                    if (h[c] >= v) {
                        break;
                    }
                    h[j] = h[c];
                    j = c;
                }
                h[j] = v;
            }
        }
        return h[0];
    }

    /** The pairwise tree over w[0, vocab): tile roots into top's leaves, then the tree over tiles; the total. */
    private double treeSum(double[] v, int vocab) {
        int tiles = (vocab + TILE - 1) / TILE;
        int tiles2 = tilesPow2(vocab);
        if (top.length < 2 * tiles2) {
            top = new double[2 * tiles2];
        }
        double[] t = top;
        Arrays.fill(t, tiles2, 2 * tiles2, 0.0);
        for (int k = 0; k < tiles; k++) {
            t[tiles2 + k] = buildTile(v, k * TILE, vocab);
        }
        for (int k = tiles2 - 1; k >= 1; k--) {
            t[k] = t[2 * k] + t[2 * k + 1];
        }
        return t[1];
    }

    private int tilesPow2(int vocab) {
        int tiles = (vocab + TILE - 1) / TILE;
        int p2 = 1;
        while (p2 < tiles) {
            p2 <<= 1;
        }
        return p2;
    }

    /** Builds the heap of one tile (leaves at [TILE, 2 TILE), zero past vocab) in {@code tile}; returns its root. */
    private double buildTile(double[] v, int start, int vocab) {
        double[] h = tile;
        for (int j = 0; j < TILE; j++) {
            int i = start + j;
            h[TILE + j] = i < vocab ? v[i] : 0.0;
        }
        for (int k = TILE - 1; k >= 1; k--) {
            h[k] = h[2 * k] + h[2 * k + 1];
        }
        return h[1];
    }

    /** u = nextDouble() · total, then the descent of the tree (class Javadoc). */
    private int draw(double[] q, int vocab) {
        double total = treeSum(q, vocab);
        int tiles2 = tilesPow2(vocab);
        double u = nextDouble() * total;
        double[] acc = {0.0};
        int t = descend(top, tiles2, u, acc);
        buildTile(q, t * TILE, vocab);
        return t * TILE + descend(tile, TILE, u, acc);
    }

    private static int descend(double[] heap, int leaves, double u, double[] acc) {
        int k = 1;
        while (k < leaves) {
            double left = heap[2 * k];
            double right = heap[2 * k + 1];
            if (right > 0.0 && (left == 0.0 || u >= acc[0] + left)) {
                acc[0] = acc[0] + left;
                k = 2 * k + 1;
            } else {
                k = 2 * k;
            }
        }
        return k - leaves;
    }

    // exp64 (libmamba's sampling::exp64): the same constants, the same order of + − ×.
    private static final double INV_LN2 = 0x1.71547652b82fep+0;
    private static final double LN2_HI = 0x1.62e42fee00000p-1;
    private static final double LN2_LO = 0x1.a39ef35793c76p-33;
    private static final double[] EXP_COEFF = {
        0x1.0000000000000p+0, 0x1.0000000000000p+0, 0x1.0000000000000p-1, 0x1.5555555555555p-3,
        0x1.5555555555555p-5, 0x1.1111111111111p-7, 0x1.6c16c16c16c17p-10, 0x1.a01a01a01a01ap-13,
        0x1.a01a01a01a01ap-16, 0x1.71de3a556c734p-19, 0x1.27e4fb7789f5cp-22, 0x1.ae64567f544e4p-26,
        0x1.1eed8eff8d898p-29, 0x1.6124613a86d09p-33
    };

    /**
     * p[i] = exp64((w[i] − max) / T), 0 for −Infinity: four tokens at a time, so that four independent Horner chains
     * overlap (one chain at a time is latency-bound, ≈ 16 ns a token); each token's arithmetic is exp64's, unchanged.
     */
    private static void exp64Weights(float[] w, int vocab, float max, double temperature, double[] p) {
        int i = 0;
        for (; i + 4 <= vocab; i += 4) {
            double d0 = (w[i] - (double) max) / temperature, d1 = (w[i + 1] - (double) max) / temperature;
            double d2 = (w[i + 2] - (double) max) / temperature, d3 = (w[i + 3] - (double) max) / temperature;
            double k0 = Math.floor(d0 * INV_LN2 + 0.5), k1 = Math.floor(d1 * INV_LN2 + 0.5);
            double k2 = Math.floor(d2 * INV_LN2 + 0.5), k3 = Math.floor(d3 * INV_LN2 + 0.5);
            double r0 = (d0 - k0 * LN2_HI) - k0 * LN2_LO, r1 = (d1 - k1 * LN2_HI) - k1 * LN2_LO;
            double r2 = (d2 - k2 * LN2_HI) - k2 * LN2_LO, r3 = (d3 - k3 * LN2_HI) - k3 * LN2_LO;
            double s0 = EXP_COEFF[13], s1 = s0, s2 = s0, s3 = s0;
            for (int n = 12; n >= 0; n--) {
                double c = EXP_COEFF[n];
                s0 = s0 * r0 + c;
                s1 = s1 * r1 + c;
                s2 = s2 * r2 + c;
                s3 = s3 * r3 + c;
            }
            p[i] = weightOf(w[i], d0, s0, k0);
            p[i + 1] = weightOf(w[i + 1], d1, s1, k1);
            p[i + 2] = weightOf(w[i + 2], d2, s2, k2);
            p[i + 3] = weightOf(w[i + 3], d3, s3, k3);
        }
        for (; i < vocab; i++) {
            p[i] = w[i] == Float.NEGATIVE_INFINITY ? 0.0 : exp64((w[i] - (double) max) / temperature);
        }
    }

    /** exp64's last step for one token of exp64Weights (and its −708 / −Infinity cases). */
    private static double weightOf(float x, double d, double s, double kd) {
        if (x == Float.NEGATIVE_INFINITY || !(d >= -708.0)) {
            return 0.0;
        }
        return s * Double.longBitsToDouble((long) ((int) kd + 1023) << 52);
    }

    /** e<sup>d</sup> for d ≤ 0 from + − × only; 0 below −708 (see the class Javadoc). */
    static double exp64(double d) {
        if (!(d >= -708.0)) {
            return 0.0;
        }
        double kd = Math.floor(d * INV_LN2 + 0.5);
        double r = (d - kd * LN2_HI) - kd * LN2_LO;
        double s = EXP_COEFF[13];
        for (int n = 12; n >= 0; n--) {
            s = s * r + EXP_COEFF[n];
        }
        return s * Double.longBitsToDouble((long) ((int) kd + 1023) << 52);
    }

    private void applyRepetitionPenalty(float[] w, int vocab, int[] history, int length, float penalty) {
        if (seen.length < vocab) {
            seen = new int[vocab];
            stamp = 0;
        }
        if (++stamp == 0) {
            Arrays.fill(seen, 0);
            stamp = 1;
        }
        for (int j = 0; j < length; j++) {
            int id = history[j];
            if (id < 0 || id >= vocab) {
                throw new IllegalArgumentException(
                        "history[" + j + "] = " + id + " is not a token id in [0, " + vocab + ")");
            }
            if (seen[id] != stamp) {
                seen[id] = stamp;
                float x = w[id];
                w[id] = x < 0f ? x * penalty : x / penalty;
            }
        }
    }

    private void ensureCapacity(int vocab) {
        if (work.length < vocab) {
            work = new float[vocab];
            weight = new double[vocab];
            kept = new double[vocab];
        }
    }

    /**
     * A key whose ascending {@code long} order is descending logit, then ascending token id; the low
     * 32 bits are the token id (libmamba's sampling::packDescending).
     */
    static long packDescending(float value, int id) {
        int bits = Float.floatToIntBits(value == 0f ? 0f : value); // -0 and +0 tie
        int ascending = bits ^ ((bits >> 31) & 0x7fffffff);
        return ((long) ~ascending << 32) | (id & 0xffffffffL);
    }

    @Override
    public String toString() {
        return "TokenSampler{" + sampling + ", streamSeed=" + seed + '}';
    }
}
