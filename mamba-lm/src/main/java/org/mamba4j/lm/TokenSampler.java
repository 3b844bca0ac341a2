package org.mamba4j.lm;

import java.util.Arrays;
import java.util.Objects;
import java.util.SplittableRandom;
import org.mamba4j.MambaException;

/**
 * Chooses the next token of one sequence from its logits, following a {@link Sampling}.
 *
 * <p>Use one sampler per generated sequence: each owns its random stream, so the rows of a batch
 * sample independently and a row gives the same tokens as generating that sequence alone with a
 * sampler built the same way. The stream is {@link SplittableRandom}, whose algorithm is fixed by
 * the Java specification, and the arithmetic is reproducible too ({@link StrictMath#exp} and
 * Java 17's strict floating point, summed in a fixed order), so a seed gives the same tokens on every
 * JVM and platform. Greedy steps draw nothing; every sampled step draws exactly one {@code double}.
 *
 * <h2>Order of operations</h2>
 *
 * The same as the logits processors and warpers of HuggingFace transformers' {@code generate}:
 *
 * <ol>
 *   <li>Repetition penalty over the distinct tokens of {@code history}: a logit {@code < 0} is
 *       multiplied by the penalty, any other divided by it (float arithmetic, like PyTorch).
 *   <li>Temperature 0: return the argmax (ties go to the lowest id). Nothing below happens.
 *   <li>Temperature: logits are divided by it. (It is folded into the softmax as {@code exp((l -
 *       max) / T)}, which never overflows and ranks tokens exactly as {@code l / T} would.)
 *   <li>Top-k: keep the {@code k} largest logits; tokens tied with the k-th are kept as well.
 *   <li>Softmax in double over the survivors.
 *   <li>Top-p: keep the smallest set of most probable tokens whose cumulative probability is at
 *       least {@code p}; the most probable token is always kept.
 *   <li>Min-p: drop tokens whose probability is below {@code minP} times the largest probability.
 *   <li>Renormalise and draw one uniform double to pick the token.
 * </ol>
 *
 * <p>Cost: O(V) when top-k and top-p are off; otherwise the candidates are sorted by a primitive
 * sort of packed {@code long} keys (no boxing), first only those within a factor 1e-4 of the most
 * likely token, widening only when that set cannot decide the result, so O(V log V) at worst.
 * Scratch arrays are allocated on first use (and again only if a larger vocabulary shows up) and
 * reused afterwards; the logits passed in are never modified.
 *
 * <p>Logits that are NaN or +Infinity throw {@link MambaException}; -Infinity marks a banned token.
 *
 * <p>Not thread-safe: one sampler belongs to one sequence on one thread at a time.
 */
public final class TokenSampler {

    /** Ratios to the most likely token's weight tried, in turn, as the first cut before sorting. */
    private static final double[] CUTS = {1e-4, 1e-12, 0.0};

    private final Sampling sampling;
    private final long seed;
    private final SplittableRandom random;

    private float[] work = new float[0];
    private double[] weight = new double[0];
    private long[] order = new long[0];
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
        this.random = new SplittableRandom(seed);
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
        double minP = sampling.minP();
        double[] p = weight;
        double total = 0.0;
        for (int i = 0; i < vocab; i++) {
            float x = w[i];
            double e = x == Float.NEGATIVE_INFINITY ? 0.0 : StrictMath.exp((x - (double) bestValue) / temperature);
            p[i] = e;
            total += e;
        }

        int topK = sampling.topK();
        double topP = sampling.topP();
        boolean kActive = topK > 0 && topK < finite;
        if (!kActive && topP >= 1.0) {
            // No ordering needed: min-p is a plain threshold on the weight relative to the maximum (1).
            if (minP > 0.0) {
                total = 0.0;
                for (int i = 0; i < vocab; i++) {
                    if (p[i] < minP) {
                        p[i] = 0.0;
                    }
                    total += p[i];
                }
            }
            return draw(p, vocab, total, best);
        }
        return sampleSorted(w, p, vocab, finite, total, kActive, topK, topP, minP);
    }

    private int sampleSorted(
            float[] w,
            double[] p,
            int vocab,
            int finite,
            double totalAll,
            boolean kActive,
            int topK,
            double topP,
            double minP) {
        if (order.length < vocab) {
            order = new long[vocab];
        }
        long[] keys = order;
        for (double cut : CUTS) {
            int n = 0;
            for (int i = 0; i < vocab; i++) {
                if (cut > 0.0 ? p[i] >= cut : w[i] > Float.NEGATIVE_INFINITY) {
                    keys[n++] = packDescending(w[i], i);
                }
            }
            if (kActive && n < topK && cut > 0.0) {
                continue; // the top-k set reaches below this cut
            }
            Arrays.sort(keys, 0, n);

            int keep;
            double norm;
            boolean complete;
            if (kActive) {
                float kth = w[(int) keys[topK - 1]];
                keep = topK;
                while (keep < n && w[(int) keys[keep]] == kth) {
                    keep++;
                }
                norm = 0.0;
                for (int j = 0; j < keep; j++) {
                    norm += p[(int) keys[j]];
                }
                complete = true;
            } else {
                keep = n;
                norm = totalAll;
                complete = n == finite;
            }

            if (topP < 1.0) {
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
                if (!reached && !complete) {
                    continue; // the nucleus reaches below this cut
                }
            }

            if (minP > 0.0) {
                while (keep > 1 && p[(int) keys[keep - 1]] < minP) {
                    keep--;
                }
            }

            double total = 0.0;
            for (int j = 0; j < keep; j++) {
                total += p[(int) keys[j]];
            }
            double u = random.nextDouble() * total;
            double acc = 0.0;
            for (int j = 0; j < keep; j++) {
                acc += p[(int) keys[j]];
                if (u < acc) {
                    return (int) keys[j];
                }
            }
            return (int) keys[keep - 1];
        }
        throw new AssertionError("the last cut keeps every finite logit");
    }

    private int draw(double[] p, int vocab, double total, int fallback) {
        double u = random.nextDouble() * total;
        double acc = 0.0;
        int last = fallback;
        for (int i = 0; i < vocab; i++) {
            double e = p[i];
            if (e > 0.0) {
                acc += e;
                last = i;
                if (u < acc) {
                    return i;
                }
            }
        }
        return last; // rounding left u at the very top
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
        }
    }

    /**
     * A key whose ascending {@code long} order is descending logit, then ascending token id; the low
     * 32 bits are the token id.
     */
    private static long packDescending(float value, int id) {
        int bits = Float.floatToIntBits(value == 0f ? 0f : value); // -0 and +0 tie
        int ascending = bits ^ ((bits >> 31) & 0x7fffffff);
        return ((long) ~ascending << 32) | (id & 0xffffffffL);
    }

    @Override
    public String toString() {
        return "TokenSampler{" + sampling + ", streamSeed=" + seed + '}';
    }
}
