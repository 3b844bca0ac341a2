package org.mamba4j;

/**
 * Dynamic loss scaling with {@code torch.cuda.amp.GradScaler} semantics, for {@link Trainer.Builder#lossScaler}.
 *
 * <p>Every backward's output gradient (and an end-state gradient, {@link Trainer#setEndStateGradient}) is multiplied
 * by the current scale, so small gradients survive 16-bit arithmetic; the optimizer step takes the global norm of the
 * <em>unscaled</em> gradient (what {@link StepResult#gradNorm()} reports and clipping uses) and AdamW divides the
 * gradient by the scale before using it. A step whose gradient is NaN or infinite (an overflow under the scale) or whose
 * fused loss is is skipped — weights, AdamW moments and step count unchanged, gradients discarded, reported as
 * {@link StepResult#skipped()}: the same rule as without a scaler, for every {@link DType} — and the scale is multiplied
 * by {@link #backoffFactor()}. After {@link #growthInterval()} applied steps in a row it is multiplied by
 * {@link #growthFactor()} (never to infinity). With the default powers of two, scaling and unscaling are exact: a
 * scaled step that does not overflow gives the bits of the unscaled one.
 *
 * <p>Units: losses, {@link StepResult#gradNorm()} and {@link Trainer#readStartStateGradient} are those of the loss
 * itself; the raw accumulated gradients read between a backward and its optimizer step ({@link Trainer#gradient},
 * {@link Trainer#inputGradient}) carry the scale of {@link StepResult#lossScale()} (divide by it).
 *
 * @param initScale      the scale to start from (default 2^16 = 65536), finite and &gt; 0
 * @param growthFactor   multiplier after {@code growthInterval} clean steps (default 2), &gt; 1
 * @param backoffFactor  multiplier after a skipped step (default 0.5), in (0, 1)
 * @param growthInterval applied steps in a row before the scale grows (default 2000), &ge; 1
 */
public record LossScaler(double initScale, double growthFactor, double backoffFactor, int growthInterval) {

    public LossScaler {
        if (!(initScale > 0) || (float) initScale == 0 || Float.isInfinite((float) initScale))
            throw new InvalidConfigException("loss scaler initScale = " + initScale + " must be finite and > 0 (in float)");
        if (!(growthFactor > 1) || Double.isInfinite(growthFactor))
            throw new InvalidConfigException("loss scaler growthFactor = " + growthFactor + " must be finite and > 1");
        if (!(backoffFactor > 0 && backoffFactor < 1))
            throw new InvalidConfigException("loss scaler backoffFactor = " + backoffFactor + " must be in (0, 1)");
        if (growthInterval < 1)
            throw new InvalidConfigException("loss scaler growthInterval = " + growthInterval + " must be >= 1");
    }

    /** GradScaler's defaults: scale 2^16, ×2 every 2000 clean steps, ×0.5 on an overflow. */
    public static LossScaler dynamic() {
        return new LossScaler(65536, 2, 0.5, 2000);
    }

    public LossScaler withInitScale(double scale) {
        return new LossScaler(scale, growthFactor, backoffFactor, growthInterval);
    }

    public LossScaler withGrowth(double factor, int interval) {
        return new LossScaler(initScale, factor, backoffFactor, interval);
    }

    public LossScaler withBackoffFactor(double factor) {
        return new LossScaler(initScale, growthFactor, factor, growthInterval);
    }
}
