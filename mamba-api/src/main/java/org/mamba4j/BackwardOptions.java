package org.mamba4j;

/**
 * How a backward call treats its gradient: whether an optimizer step follows, and a factor applied to
 * the output gradient first. An immutable value.
 *
 * <p><b>Gradient accumulation.</b> Gradients from backward calls <em>add up</em> until an optimizer step
 * uses and clears them. The output gradient you pass is the gradient of <em>your</em> loss; the fused
 * losses ({@link Trainer#stepMse}, {@link Trainer#stepCrossEntropy}) use the mean over the micro-batch.
 * So k micro-batches accumulated with scale 1 step with the <em>sum</em> of their mean-loss gradients;
 * for the mean over micro-batches pass {@code BackwardOptions.accumulate().scale(1.0 / k)} for each and
 * {@code BackwardOptions.step().scale(1.0 / k)} for the last (or call {@link Trainer#optimizerStep()}).
 *
 * <pre>{@code
 * for (int i = 0; i < k; i++)
 *     trainer.step(inputs[i], dOut[i], (i < k - 1 ? BackwardOptions.accumulate() : BackwardOptions.step()).scale(1.0 / k));
 * }</pre>
 */
public final class BackwardOptions {
    private static final BackwardOptions STEP = new BackwardOptions(true, 1.0);
    private static final BackwardOptions ACCUMULATE = new BackwardOptions(false, 1.0);

    private final boolean applyOptimizer;
    private final double scale;

    private BackwardOptions(boolean applyOptimizer, double scale) {
        if (!Double.isFinite(scale)) throw new IllegalArgumentException("scale = " + scale + " must be finite");
        this.applyOptimizer = applyOptimizer;
        this.scale = scale;
    }

    /** Backward, then clip + AdamW with everything accumulated so far (the default). */
    public static BackwardOptions step() {
        return STEP;
    }

    /** Backward only: the gradients add to those accumulated so far; no optimizer step. */
    public static BackwardOptions accumulate() {
        return ACCUMULATE;
    }

    /** The same options with the output gradient multiplied by {@code scale} first (default 1). */
    public BackwardOptions scale(double scale) {
        return new BackwardOptions(applyOptimizer, scale);
    }

    public boolean applyOptimizer() {
        return applyOptimizer;
    }

    public double scale() {
        return scale;
    }

    @Override
    public String toString() {
        return (applyOptimizer ? "step" : "accumulate") + (scale != 1.0 ? " scale " + scale : "");
    }
}
