package org.mamba4j.lm;

import java.util.Arrays;
import java.util.Locale;
import java.util.Objects;
import org.mamba4j.InvalidConfigException;

/**
 * How the next token is chosen during generation: an immutable value built in a fluent style.
 *
 * <pre>{@code
 * Sampling greedy = Sampling.greedy().maxNewTokens(64).stopTokens(0);
 * Sampling creative = Sampling.ofTemperature(0.8).topK(40).topP(0.95).seed(42);
 * Sampling tweaked = creative.temperature(0.7).repetitionPenalty(1.1);
 * }</pre>
 *
 * <p>Every {@code with}-style method ({@link #temperature(double)}, {@link #topK(int)}, ...) returns a
 * new instance and leaves this one unchanged; an out-of-range value throws {@link
 * InvalidConfigException} naming the field and the allowed range. The neutral value of each filter
 * switches it off: {@code topK == 0}, {@code topP == 1}, {@code minP == 0}, {@code
 * repetitionPenalty == 1}.
 *
 * <p>The static factory for a sampled configuration is {@link #ofTemperature(double)} rather than
 * {@code temperature(double)}, because Java cannot have a static and an instance method with the
 * same signature, and a static {@code temperature(double)} reached through an instance would
 * silently drop every other setting.
 *
 * <p>The seed defaults to 0, so generation is reproducible unless a seed is set; the same settings and
 * seed give the same tokens on every JVM and on every device: {@link MambaLM#generate} and the {@link Generator}
 * sample on the model's device with libmamba's sampler, which follows {@link TokenSampler}'s rule bit for bit.
 */
public final class Sampling {

    /** Default for {@link #maxNewTokens()}. */
    public static final int DEFAULT_MAX_NEW_TOKENS = 128;

    private static final int[] NO_TOKENS = new int[0];
    private static final Sampling GREEDY =
            new Sampling(0.0, 0, 1.0, 0.0, 1.0, 0L, DEFAULT_MAX_NEW_TOKENS, NO_TOKENS);

    private final double temperature;
    private final int topK;
    private final double topP;
    private final double minP;
    private final double repetitionPenalty;
    private final long seed;
    private final int maxNewTokens;
    private final int[] stopTokens;

    private Sampling(
            double temperature,
            int topK,
            double topP,
            double minP,
            double repetitionPenalty,
            long seed,
            int maxNewTokens,
            int[] stopTokens) {
        this.temperature = temperature;
        this.topK = topK;
        this.topP = topP;
        this.minP = minP;
        this.repetitionPenalty = repetitionPenalty;
        this.seed = seed;
        this.maxNewTokens = maxNewTokens;
        this.stopTokens = stopTokens;
    }

    /** Greedy decoding: temperature 0, always the highest logit (ties go to the lowest token id). */
    public static Sampling greedy() {
        return GREEDY;
    }

    /**
     * Sampling at the given temperature with every filter off.
     *
     * @param temperature finite and {@code >= 0}; 0 means greedy
     * @throws InvalidConfigException when out of range
     */
    public static Sampling ofTemperature(double temperature) {
        return GREEDY.temperature(temperature);
    }

    // ---------------------------------------------------------------- with-methods

    /**
     * Returns a copy with this temperature: logits are divided by it before the softmax.
     *
     * @param t finite and {@code >= 0}; 0 means greedy (argmax)
     */
    public Sampling temperature(double t) {
        if (!(t >= 0.0) || Double.isInfinite(t)) {
            throw new InvalidConfigException(
                    "temperature must be finite and >= 0 (0 = greedy), got " + t);
        }
        return new Sampling(t, topK, topP, minP, repetitionPenalty, seed, maxNewTokens, stopTokens);
    }

    /**
     * Returns a copy keeping only the {@code k} most likely tokens (ties at the boundary are kept).
     *
     * @param k {@code >= 0}; 0 switches the filter off
     */
    public Sampling topK(int k) {
        if (k < 0) {
            throw new InvalidConfigException("topK must be >= 0 (0 = off), got " + k);
        }
        return new Sampling(temperature, k, topP, minP, repetitionPenalty, seed, maxNewTokens, stopTokens);
    }

    /**
     * Returns a copy with nucleus sampling: keep the smallest set of most likely tokens whose
     * probabilities add up to at least {@code p}.
     *
     * @param p in {@code (0, 1]}; 1 switches the filter off
     */
    public Sampling topP(double p) {
        if (!(p > 0.0 && p <= 1.0)) {
            throw new InvalidConfigException("topP must be in (0, 1] (1 = off), got " + p);
        }
        return new Sampling(temperature, topK, p, minP, repetitionPenalty, seed, maxNewTokens, stopTokens);
    }

    /**
     * Returns a copy dropping tokens whose probability is below {@code p} times the largest one.
     *
     * @param p in {@code [0, 1)}; 0 switches the filter off
     */
    public Sampling minP(double p) {
        if (!(p >= 0.0 && p < 1.0)) {
            throw new InvalidConfigException("minP must be in [0, 1) (0 = off), got " + p);
        }
        return new Sampling(temperature, topK, topP, p, repetitionPenalty, seed, maxNewTokens, stopTokens);
    }

    /**
     * Returns a copy with the CTRL-style repetition penalty applied to every distinct token already in
     * the sequence: a positive logit is divided by {@code r}, a negative one multiplied by it.
     *
     * @param r finite and {@code > 0}; 1 switches it off, above 1 discourages repeats
     */
    public Sampling repetitionPenalty(double r) {
        if (!(r > 0.0) || Double.isInfinite(r)) {
            throw new InvalidConfigException(
                    "repetitionPenalty must be finite and > 0 (1 = off), got " + r);
        }
        return new Sampling(temperature, topK, topP, minP, r, seed, maxNewTokens, stopTokens);
    }

    /** Returns a copy with this random seed (any value). */
    public Sampling seed(long seed) {
        return new Sampling(temperature, topK, topP, minP, repetitionPenalty, seed, maxNewTokens, stopTokens);
    }

    /**
     * Returns a copy generating at most {@code n} new tokens.
     *
     * @param n {@code >= 1}
     */
    public Sampling maxNewTokens(int n) {
        if (n < 1) {
            throw new InvalidConfigException("maxNewTokens must be >= 1, got " + n);
        }
        return new Sampling(temperature, topK, topP, minP, repetitionPenalty, seed, n, stopTokens);
    }

    /**
     * Returns a copy that stops generating after any of these token ids; replaces the previous list.
     * An empty array clears it ({@code stopTokens()} without arguments is the getter). Duplicates are
     * removed, the order is kept.
     *
     * @param ids token ids, each {@code >= 0}
     */
    public Sampling stopTokens(int... ids) {
        if (ids == null) {
            throw new InvalidConfigException("stopTokens must not be null (pass no ids to clear them)");
        }
        for (int i = 0; i < ids.length; i++) {
            if (ids[i] < 0) {
                throw new InvalidConfigException(
                        "stopTokens[" + i + "] must be a token id >= 0, got " + ids[i]);
            }
        }
        int[] copy = Arrays.stream(ids).distinct().toArray();
        return new Sampling(
                temperature, topK, topP, minP, repetitionPenalty, seed, maxNewTokens,
                copy.length == 0 ? NO_TOKENS : copy);
    }

    // ---------------------------------------------------------------- getters

    /** The temperature; 0 means greedy. */
    public double temperature() {
        return temperature;
    }

    /** The top-k size; 0 means off. */
    public int topK() {
        return topK;
    }

    /** The nucleus mass; 1 means off. */
    public double topP() {
        return topP;
    }

    /** The min-p ratio; 0 means off. */
    public double minP() {
        return minP;
    }

    /** The repetition penalty; 1 means off. */
    public double repetitionPenalty() {
        return repetitionPenalty;
    }

    /** The random seed (default 0). */
    public long seed() {
        return seed;
    }

    /** The maximum number of generated tokens (default {@value #DEFAULT_MAX_NEW_TOKENS}). */
    public int maxNewTokens() {
        return maxNewTokens;
    }

    /** A copy of the stop token ids (empty when none). */
    public int[] stopTokens() {
        return stopTokens.clone();
    }

    /** Whether {@code id} is one of the {@link #stopTokens()}. */
    public boolean isStopToken(int id) {
        for (int s : stopTokens) {
            if (s == id) {
                return true;
            }
        }
        return false;
    }

    /** Whether the temperature is 0, so the next token is always the argmax. */
    public boolean isGreedy() {
        return temperature == 0.0;
    }

    // ---------------------------------------------------------------- value semantics

    @Override
    public boolean equals(Object o) {
        if (this == o) {
            return true;
        }
        if (!(o instanceof Sampling)) {
            return false;
        }
        Sampling s = (Sampling) o;
        return Double.compare(temperature, s.temperature) == 0
                && topK == s.topK
                && Double.compare(topP, s.topP) == 0
                && Double.compare(minP, s.minP) == 0
                && Double.compare(repetitionPenalty, s.repetitionPenalty) == 0
                && seed == s.seed
                && maxNewTokens == s.maxNewTokens
                && Arrays.equals(stopTokens, s.stopTokens);
    }

    @Override
    public int hashCode() {
        return 31 * Objects.hash(temperature, topK, topP, minP, repetitionPenalty, seed, maxNewTokens)
                + Arrays.hashCode(stopTokens);
    }

    /** For example {@code Sampling{temperature=0.8, topK=40, topP=0.95, maxNewTokens=128, seed=0}}. */
    @Override
    public String toString() {
        StringBuilder b = new StringBuilder("Sampling{");
        if (isGreedy()) {
            b.append("greedy");
        } else {
            b.append("temperature=").append(fmt(temperature));
        }
        if (topK != 0) {
            b.append(", topK=").append(topK);
        }
        if (topP != 1.0) {
            b.append(", topP=").append(fmt(topP));
        }
        if (minP != 0.0) {
            b.append(", minP=").append(fmt(minP));
        }
        if (repetitionPenalty != 1.0) {
            b.append(", repetitionPenalty=").append(fmt(repetitionPenalty));
        }
        b.append(", maxNewTokens=").append(maxNewTokens);
        b.append(", seed=").append(seed);
        if (stopTokens.length > 0) {
            b.append(", stopTokens=").append(Arrays.toString(stopTokens));
        }
        return b.append('}').toString();
    }

    private static String fmt(double v) {
        if (v == Math.rint(v) && Math.abs(v) < 1e15) {
            return String.format(Locale.ROOT, "%.1f", v);
        }
        return Double.toString(v);
    }
}
