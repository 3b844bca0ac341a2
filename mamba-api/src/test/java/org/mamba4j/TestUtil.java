package org.mamba4j;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Random;

/**
 * Shared helpers for numerical tests: random data, relative errors. Public for the tests of mamba-lm, which get it from
 * mamba-api's test jar.
 */
public final class TestUtil {
    private TestUtil() {}

    /** Uniform values in [-scale, scale), never all zero. */
    public static float[] random(Random rng, int n, double scale) {
        float[] v = new float[n];
        for (int i = 0; i < n; i++) v[i] = (float) ((rng.nextDouble() * 2 - 1) * scale);
        return v;
    }

    /** Central differences of {@code loss} over every element of {@code arr} with step h (each restored afterwards). */
    public static double[] centralDifferences(double[] arr, double h, java.util.function.DoubleSupplier loss) {
        double[] g = new double[arr.length];
        for (int i = 0; i < arr.length; i++) {
            double v = arr[i];
            arr[i] = v + h;
            double lp = loss.getAsDouble();
            arr[i] = v - h;
            double lm = loss.getAsDouble();
            arr[i] = v;
            g[i] = (lp - lm) / (2 * h);
        }
        return g;
    }

    /** Σ a[i]·p[i] in double: the scalar loss whose output gradient is p. */
    public static double dot(double[] a, float[] p) {
        double s = 0;
        for (int i = 0; i < a.length; i++) s += a[i] * p[i];
        return s;
    }

    /** The arrays one after the other, in list order. */
    public static float[] concat(java.util.List<float[]> parts) {
        int n = 0;
        for (float[] p : parts) n += p.length;
        float[] all = new float[n];
        int at = 0;
        for (float[] p : parts) {
            System.arraycopy(p, 0, all, at, p.length);
            at += p.length;
        }
        return all;
    }

    /** The resident set of this process in KiB, from /proc/self/status. */
    public static long rssKiB() throws IOException {
        for (String line : Files.readAllLines(Path.of("/proc/self/status")))
            if (line.startsWith("VmRSS:")) return Long.parseLong(line.replaceAll("[^0-9]", ""));
        throw new IOException("no VmRSS in /proc/self/status");
    }

    /** ‖a − b‖₂ / ‖b‖₂. */
    static double relL2(float[] a, double[] b) {
        double num = 0, den = 0;
        for (int i = 0; i < a.length; i++) {
            num += (a[i] - b[i]) * (a[i] - b[i]);
            den += b[i] * b[i];
        }
        return Math.sqrt(num / den);
    }

    static double relL2(float[] a, float[] b) {
        double[] d = new double[b.length];
        for (int i = 0; i < b.length; i++) d[i] = b[i];
        return relL2(a, d);
    }

    /**
     * Replaces every weight with fresh random values in ranges that keep the model in its working regime
     * (so the test exercises A_log, D, biases and norms with values other than their 0/1 initialisation).
     */
    static void randomizeWeights(MambaModel model, Random rng) {
        for (String name : model.parameterNames()) {
            float[] v = model.getParameter(name);
            if (name.endsWith("A_log")) {
                for (int i = 0; i < v.length; i++) v[i] = (float) (Math.log(1 + 15 * rng.nextDouble()) + 0.05);
            } else if (name.endsWith("norm.weight") || name.endsWith("norm_f.weight") || name.endsWith(".D")) {
                for (int i = 0; i < v.length; i++) v[i] = (float) (0.5 + rng.nextDouble());
            } else if (name.endsWith("dt_proj.bias")) {
                for (int i = 0; i < v.length; i++) v[i] = (float) (-4.5 + 3 * rng.nextDouble());
            } else {
                double bound = 0;
                for (float f : v) bound = Math.max(bound, Math.abs(f));
                if (bound == 0) bound = 0.1;
                v = random(rng, v.length, bound);
            }
            model.setParameter(name, v);
        }
    }
}
