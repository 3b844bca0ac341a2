package org.mamba4j.bench;

import java.util.Arrays;
import java.util.function.DoubleSupplier;

/**
 * The median of timed repetitions and an error for it in JMH's sense (half-width of a 99.9% confidence interval),
 * for the benchmark programs that time with System.nanoTime rather than JMH: error = 3.29 × 1.2533 × σ / √n, the
 * normal approximation of the median's standard error, with σ estimated robustly as 1.4826 × the median absolute
 * deviation (a few slow outliers, e.g. a page fault, do not inflate it).
 */
public record Timing(double median, double error, int n) {
    public static Timing of(double[] samples) {
        if (samples.length == 0) throw new IllegalArgumentException("no samples");
        double[] t = samples.clone();
        Arrays.sort(t);
        double median = t[t.length / 2];
        double[] dev = new double[t.length];
        for (int i = 0; i < t.length; i++) dev[i] = Math.abs(t[i] - median);
        Arrays.sort(dev);
        double sigma = 1.4826 * dev[dev.length / 2];
        return new Timing(median, 3.29 * 1.2533 * sigma / Math.sqrt(t.length), t.length);
    }

    /** Runs {@code call} {@code warmup} times untimed, then {@code reps} times; the median in milliseconds. */
    public static double medianMs(int warmup, int reps, DoubleSupplier call) {
        for (int i = 0; i < warmup; i++) call.getAsDouble();
        double[] t = new double[reps];
        for (int i = 0; i < reps; i++) {
            long t0 = System.nanoTime();
            call.getAsDouble();
            t[i] = (System.nanoTime() - t0) / 1e6;
        }
        return of(t).median();
    }
}
