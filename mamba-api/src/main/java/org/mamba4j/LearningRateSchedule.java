package org.mamba4j;

/**
 * The learning rate of each optimizer step, given its 0-based index (the trainer's step count before
 * the step). A trainer built with a schedule sets its rate from it before every optimizer step.
 */
@FunctionalInterface
public interface LearningRateSchedule {
    /** The learning rate for optimizer step {@code step} (0-based). */
    double learningRate(long step);

    /** The same rate for every step. */
    static LearningRateSchedule constant(double lr) {
        return step -> lr;
    }

    /**
     * Linear warm-up from 0 to {@code peak} over {@code warmupSteps}, then a cosine decay to {@code floor}
     * at {@code totalSteps}, constant after.
     */
    static LearningRateSchedule warmupCosine(double peak, long warmupSteps, long totalSteps, double floor) {
        if (warmupSteps < 0 || totalSteps <= warmupSteps)
            throw new IllegalArgumentException("need 0 <= warmupSteps < totalSteps (got " + warmupSteps + ", " + totalSteps + ")");
        return step -> {
            if (step < warmupSteps) return peak * (step + 1) / warmupSteps;
            if (step >= totalSteps) return floor;
            double p = (double) (step - warmupSteps) / (totalSteps - warmupSteps);
            return floor + (peak - floor) * 0.5 * (1 + Math.cos(Math.PI * p));
        };
    }
}
