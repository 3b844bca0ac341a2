package org.mamba4j.parallel;

import java.util.List;

/** The rank-order sum of {@link Reduction#RANK_ORDER}: {@code ((g0 + g1) + g2) + …} per element, in f32. */
final class RankOrderSum {
    private RankOrderSum() {}

    /** {@code gathered} holds {@code world} slices of {@code n} floats, rank after rank. */
    static float[] fold(float[] gathered, int world, int n) {
        float[] sum = new float[n];
        System.arraycopy(gathered, 0, sum, 0, n);
        for (int r = 1; r < world; r++) {
            int off = r * n;
            for (int i = 0; i < n; i++) sum[i] += gathered[off + i];
        }
        return sum;
    }

    /** The same, over one array per rank. */
    static float[] fold(List<float[]> parts) {
        float[] sum = parts.get(0).clone();
        for (int r = 1; r < parts.size(); r++) {
            float[] p = parts.get(r);
            for (int i = 0; i < sum.length; i++) sum[i] += p[i];
        }
        return sum;
    }
}
