package org.mamba4j;

import java.util.Objects;
import java.util.function.Predicate;

/**
 * AdamW hyper-parameters with PyTorch semantics ({@code torch.optim.AdamW}): an immutable value built
 * in a fluent style. Per step, with gradient g (after clipping) and step count t:
 *
 * <pre>
 * p ← p − lr·wd·p                       (decoupled weight decay; wd = 0 for no-decay tensors)
 * m ← β₁·m + (1 − β₁)·g
 * v ← β₂·v + (1 − β₂)·g²
 * p ← p − lr · m̂ / (√v̂ + eps)          m̂ = m / (1 − β₁ᵗ), v̂ = v / (1 − β₂ᵗ)
 * </pre>
 *
 * <pre>{@code
 * AdamW opt = AdamW.ofLearningRate(3e-4).weightDecay(0.01).betas(0.9, 0.95);
 * }</pre>
 *
 * <p>Every with-style method returns a new instance. The static factory is {@link #ofLearningRate}
 * rather than {@code lr(double)}: a static method reached through an instance would silently drop
 * the other settings.
 *
 * <p><b>No-decay groups.</b> By default weight decay skips what libmamba marks as no-decay for each tensor
 * — norms, biases, {@code A_log} and {@code D} (and {@code lm_head.bias}); {@link Trainer#weightDecay(String)}
 * tells the flag of a trainer's tensor. {@link #noDecay(Predicate)} replaces that rule with a predicate on the
 * tensor name: matching tensors get no decay, all others do. (The name-based {@code DEFAULT_NO_DECAY}
 * predicate and {@code isNoDecay(String)} are gone: the flags are libmamba's, one source for both languages.)
 */
public final class AdamW {
    private static final AdamW DEFAULTS = new AdamW(1e-3, 0.9, 0.999, 1e-8, 0.01, null);

    private final double learningRate, beta1, beta2, eps, weightDecay;
    private final Predicate<String> noDecay;

    private AdamW(double learningRate, double beta1, double beta2, double eps, double weightDecay,
                  Predicate<String> noDecay) {
        if (!(learningRate >= 0) || Double.isInfinite(learningRate))
            throw new InvalidConfigException("AdamW learningRate = " + learningRate + " must be finite and >= 0");
        if (!(beta1 >= 0 && beta1 < 1)) throw new InvalidConfigException("AdamW beta1 = " + beta1 + " must be in [0, 1)");
        if (!(beta2 >= 0 && beta2 < 1)) throw new InvalidConfigException("AdamW beta2 = " + beta2 + " must be in [0, 1)");
        if (!(eps > 0) || Double.isInfinite(eps)) throw new InvalidConfigException("AdamW eps = " + eps + " must be > 0");
        if (!(weightDecay >= 0) || Double.isInfinite(weightDecay))
            throw new InvalidConfigException("AdamW weightDecay = " + weightDecay + " must be finite and >= 0");
        this.learningRate = learningRate;
        this.beta1 = beta1;
        this.beta2 = beta2;
        this.eps = eps;
        this.weightDecay = weightDecay;
        this.noDecay = noDecay;
    }

    /** PyTorch's defaults except weight decay: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01. */
    public static AdamW defaults() {
        return DEFAULTS;
    }

    /** The defaults with this learning rate. */
    public static AdamW ofLearningRate(double lr) {
        return DEFAULTS.learningRate(lr);
    }

    public AdamW learningRate(double lr) {
        return new AdamW(lr, beta1, beta2, eps, weightDecay, noDecay);
    }

    public AdamW betas(double beta1, double beta2) {
        return new AdamW(learningRate, beta1, beta2, eps, weightDecay, noDecay);
    }

    public AdamW eps(double eps) {
        return new AdamW(learningRate, beta1, beta2, eps, weightDecay, noDecay);
    }

    /** Decoupled weight decay (p ← p − lr·wd·p), for tensors not in the no-decay group. */
    public AdamW weightDecay(double weightDecay) {
        return new AdamW(learningRate, beta1, beta2, eps, weightDecay, noDecay);
    }

    /** Tensors whose name matches get no weight decay; all others do (replaces the default rule). */
    public AdamW noDecay(Predicate<String> noDecay) {
        return new AdamW(learningRate, beta1, beta2, eps, weightDecay, Objects.requireNonNull(noDecay, "noDecay"));
    }

    public double learningRate() { return learningRate; }
    public double beta1() { return beta1; }
    public double beta2() { return beta2; }
    public double eps() { return eps; }
    public double weightDecay() { return weightDecay; }

    /** The user's no-decay predicate, or null for libmamba's per-tensor defaults. */
    Predicate<String> noDecayRule() {
        return noDecay;
    }

    @Override
    public String toString() {
        return "AdamW{lr=" + learningRate + ", betas=(" + beta1 + ", " + beta2 + "), eps=" + eps + ", weightDecay="
                + weightDecay + (noDecay != null ? ", custom no-decay rule" : "") + "}";
    }
}
