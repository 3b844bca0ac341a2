package org.mamba4j;

/**
 * What a training call reports.
 *
 * @param step              optimizer steps taken so far, after this call
 * @param optimizerStepped  whether this call ran an optimizer step
 * @param skipped           an optimizer step was asked for but skipped, never applied: the gradient norm was NaN or
 *                          infinite, or the fused loss of this call or of a micro-batch accumulated since the last
 *                          step was (as a float). The weights, moments and step count are unchanged and the
 *                          accumulated gradients were discarded, so training can go on with the next batch
 * @param gradNorm          the global L2 norm of the gradient before clipping, for calls that ran (or
 *                          tried) an optimizer step; NaN for accumulate-only calls
 * @param learningRate      the learning rate of this call's optimizer step (the current one otherwise)
 * @param loss              the micro-batch's mean loss for the fused loss calls; NaN otherwise
 * @param accuracy          cross-entropy calls: the fraction of counted positions whose argmax is the
 *                          target; NaN otherwise
 * @param counted           targets the loss counted (cross-entropy: positions not ignored; MSE: elements);
 *                          0 without a loss
 * @param lossScale         the loss scale this call's gradients were computed with ({@link LossScaler}; 1 without)
 */
public record StepResult(long step, boolean optimizerStepped, boolean skipped, double gradNorm, double learningRate,
                         double loss, double accuracy, long counted, double lossScale) {

    /** A result without loss scaling (lossScale 1). */
    public StepResult(long step, boolean optimizerStepped, boolean skipped, double gradNorm, double learningRate,
                      double loss, double accuracy, long counted) {
        this(step, optimizerStepped, skipped, gradNorm, learningRate, loss, accuracy, counted, 1);
    }

    @Override
    public String toString() {
        StringBuilder s = new StringBuilder("step ").append(step);
        if (!Double.isNaN(loss)) s.append(String.format(" loss %.5f", loss));
        if (!Double.isNaN(accuracy)) s.append(String.format(" acc %.1f%%", 100 * accuracy));
        if (!Double.isNaN(gradNorm)) s.append(String.format(" |g| %.4g", gradNorm));
        s.append(String.format(" lr %.3g", learningRate));
        if (lossScale != 1) s.append(String.format(" scale %.6g", lossScale));
        if (skipped) s.append(" (optimizer step skipped: non-finite loss or gradient)");
        else if (!optimizerStepped) s.append(" (no optimizer step)");
        return s.toString();
    }
}
