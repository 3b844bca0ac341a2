package org.mamba4j;

import java.util.Objects;

/**
 * Mean squared error over every element, {@code L = mean((y − t)²)}, with gradient {@code 2(y − t)/n}:
 * the same loss as {@link Trainer#stepMse} computes natively (PyTorch's {@code MSELoss()}).
 */
public final class MseLoss {
    private MseLoss() {}

    /** The loss of {@code outputs} against {@code targets} (equal lengths) and its gradient. */
    public static LossGradient compute(float[] outputs, float[] targets) {
        Objects.requireNonNull(outputs, "outputs");
        Objects.requireNonNull(targets, "targets");
        Checks.length("targets", targets.length, outputs.length);
        if (outputs.length == 0) throw new IllegalArgumentException("outputs are empty");
        int n = outputs.length;
        float[] g = new float[n];
        double sse = 0;
        for (int i = 0; i < n; i++) {
            float e = outputs[i] - targets[i];
            sse += (double) e * e;
            g[i] = 2f * e / n;
        }
        return new LossGradient(sse / n, g);
    }
}
