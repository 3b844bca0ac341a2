package org.mamba4j.lm;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.mamba4j.MambaException;

class TokenSamplerTest {

    private static final int DRAWS = 20_000;
    private static final double TOLERANCE = 0.02;

    // ------------------------------------------------------------------ greedy

    @Test
    void greedyIsArgmaxWithTiesGoingToTheLowestId() {
        TokenSampler s = new TokenSampler(Sampling.greedy());
        assertEquals(2, s.next(new float[] {0.1f, -3f, 4.5f, 4.4f}, null, 0));
        assertEquals(1, s.next(new float[] {1f, 7f, 3f, 7f, 7f}, null, 0));
        assertEquals(0, s.next(new float[] {-2f, -2f}, null, 0));
        assertEquals(3, s.next(new float[] {Float.NEGATIVE_INFINITY, -1e30f, -1e31f, 0f}, null, 0));
    }

    @Test
    void readsOnlyItsRowAndNeverModifiesTheLogits() {
        float[] batch = {9f, 9f, 9f, /* row 1: */ 0.5f, 2f, 1f, /* row 2: */ 9f, 9f, 9f};
        float[] before = batch.clone();
        TokenSampler s = new TokenSampler(Sampling.greedy().repetitionPenalty(3.0));
        assertEquals(1, s.next(batch, 3, 3, new int[] {0}, 1));
        assertEquals(2, s.next(batch, 3, 3, new int[] {1, 1}, 2)); // 2 / 3 < 1
        TokenSampler t = new TokenSampler(Sampling.ofTemperature(1).topK(2).topP(0.9).repetitionPenalty(1.3));
        for (int i = 0; i < 50; i++) {
            int id = t.next(batch, 3, 3, new int[] {1, 2}, 2);
            assertTrue(id >= 0 && id < 3);
        }
        assertArrayEquals(before, batch);
    }

    // ------------------------------------------------------------------ reproducibility

    @Test
    void sameSeedSameTokensDifferentSeedDifferentTokens() {
        float[] logits = randomLogits(1000, 3.0, 1);
        Sampling sampling = Sampling.ofTemperature(1.0).topK(100).topP(0.95).seed(1234);
        int[] a = drawMany(new TokenSampler(sampling), logits, 300);
        int[] b = drawMany(new TokenSampler(sampling), logits, 300);
        int[] c = drawMany(new TokenSampler(sampling, sampling.seed()), logits, 300);
        int[] d = drawMany(new TokenSampler(sampling.seed(1235)), logits, 300);
        assertArrayEquals(a, b);
        assertArrayEquals(a, c);
        assertFalse(Arrays.equals(a, d));
    }

    @Test
    void samplersAreIndependentSoInterleavedRowsMatchSeparateRuns() {
        float[] logits = randomLogits(200, 2.0, 2);
        Sampling sampling = Sampling.ofTemperature(0.9).seed(5);
        int[] alone = drawMany(new TokenSampler(sampling, TokenSampler.rowSeed(5, 0)), logits, 100);
        TokenSampler row0 = new TokenSampler(sampling, TokenSampler.rowSeed(5, 0));
        TokenSampler row1 = new TokenSampler(sampling, TokenSampler.rowSeed(5, 1));
        int[] interleaved = new int[100];
        int[] other = new int[100];
        for (int i = 0; i < 100; i++) {
            interleaved[i] = row0.next(logits, null, 0);
            other[i] = row1.next(logits, null, 0);
        }
        assertArrayEquals(alone, interleaved);
        assertFalse(Arrays.equals(interleaved, other));
        assertNotEquals(TokenSampler.rowSeed(5, 0), TokenSampler.rowSeed(5, 1));
        assertNotEquals(TokenSampler.rowSeed(5, 1), TokenSampler.rowSeed(6, 0));
        assertEquals(TokenSampler.rowSeed(5, 3), TokenSampler.rowSeed(5, 3));
    }

    @Test
    void plainSamplingFollowsTheDocumentedStream() {
        // SplittableRandom's algorithm is specified: with every filter off, one nextDouble per step is
        // walked over the softmax in token-id order, so the stream can be predicted independently.
        float[] logits = {1f, 2f, 0.5f, -1f, 1.5f};
        int[] got = drawMany(new TokenSampler(Sampling.ofTemperature(1.0).seed(42)), logits, 12);
        int[] again = drawMany(new TokenSampler(Sampling.ofTemperature(1.0).seed(42)), logits, 12);
        assertArrayEquals(got, again);
        int[] expected = expectedStream(logits, 42, 12);
        assertArrayEquals(expected, got);
    }

    @Test
    void tokensAreTheSameOnEveryJvm() {
        // SplittableRandom's stream, java.util.Random and strict floating point are all specified bit for
        // bit (and the sampler uses no library function: exp64 is + − × only), so these constants must hold
        // everywhere — in libmamba's native sampler too (DeviceSamplerTest); change them only when the sampling
        // algorithm changes on purpose. (Changed when the sums became the pairwise tree shared with the device
        // sampler and the draw its descent in id order: the filtered case drew in sorted order before.)
        float[] small = {1f, 2f, 0.5f, -1f, 1.5f};
        assertArrayEquals(new int[] {4, 0, 1, 1, 0, 4, 1, 4, 1, 2, 1, 1},
                drawMany(new TokenSampler(Sampling.ofTemperature(1.0).seed(42)), small, 12));
        Random r = new Random(99);
        float[] big = new float[1000];
        for (int i = 0; i < big.length; i++) {
            big[i] = (float) (r.nextGaussian() * 2);
        }
        TokenSampler s = new TokenSampler(
                Sampling.ofTemperature(0.7).topK(40).topP(0.9).minP(0.01).repetitionPenalty(1.1).seed(7));
        int[] got = new int[12];
        for (int i = 0; i < got.length; i++) {
            got[i] = s.next(big, new int[] {1, 2, 3}, 3);
        }
        assertArrayEquals(new int[] {470, 10, 909, 672, 647, 324, 662, 388, 324, 470, 184, 939}, got);
    }

    /** The documented contract: one nextDouble per step, walked over token ids in order. */
    private static int[] expectedStream(float[] logits, long seed, int n) {
        java.util.SplittableRandom r = new java.util.SplittableRandom(seed);
        double[] p = softmax(logits, 1.0);
        int[] out = new int[n];
        for (int i = 0; i < n; i++) {
            double u = r.nextDouble();
            double acc = 0;
            int pick = p.length - 1;
            for (int j = 0; j < p.length; j++) {
                acc += p[j];
                if (u < acc) {
                    pick = j;
                    break;
                }
            }
            out[i] = pick;
        }
        return out;
    }

    // ------------------------------------------------------------------ distributions

    @Test
    void temperatureOneMatchesSoftmax() {
        float[] logits = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
        double[] freq = frequencies(new TokenSampler(Sampling.ofTemperature(1.0).seed(11)), logits);
        assertClose(softmax(logits, 1.0), freq);
    }

    @Test
    void temperatureScalesTheLogits() {
        float[] logits = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
        assertClose(softmax(logits, 0.5), frequencies(new TokenSampler(Sampling.ofTemperature(0.5).seed(3)), logits));
        assertClose(softmax(logits, 2.5), frequencies(new TokenSampler(Sampling.ofTemperature(2.5).seed(4)), logits));
    }

    @Test
    void topKRenormalisesOverTheKLargest() {
        float[] logits = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
        double[] freq = frequencies(new TokenSampler(Sampling.ofTemperature(1.0).topK(2).seed(8)), logits);
        double[] expected = restrict(softmax(logits, 1.0), 1, 4);
        assertClose(expected, freq);
        assertEquals(0.0, freq[0] + freq[2] + freq[3]);
    }

    @Test
    void topKKeepsTiesAtTheBoundary() {
        float[] logits = {3f, 2f, 2f, 1f, 2f};
        double[] freq = frequencies(new TokenSampler(Sampling.ofTemperature(1.0).topK(2).seed(9)), logits);
        assertClose(restrict(softmax(logits, 1.0), 0, 1, 2, 4), freq);
        assertEquals(0.0, freq[3]);
    }

    @Test
    void topPKeepsTheSmallestNucleus() {
        // probabilities 0.5, 0.3, 0.15, 0.05 (in a shuffled id order)
        float[] logits = logitsOf(0.15, 0.5, 0.05, 0.3);
        double[] freq = frequencies(new TokenSampler(Sampling.ofTemperature(1.0).topP(0.75).seed(10)), logits);
        assertClose(new double[] {0, 0.5 / 0.8, 0, 0.3 / 0.8}, freq);
        double[] wider = frequencies(new TokenSampler(Sampling.ofTemperature(1.0).topP(0.9).seed(10)), logits);
        assertClose(new double[] {0.15 / 0.95, 0.5 / 0.95, 0, 0.3 / 0.95}, wider);
    }

    @Test
    void topPActsAfterTopK() {
        // top-k 3 leaves 0.5, 0.3, 0.15 renormalised to 0.526, 0.316, 0.158; top-p 0.8 then keeps two.
        float[] logits = logitsOf(0.5, 0.3, 0.15, 0.05);
        double[] freq =
                frequencies(new TokenSampler(Sampling.ofTemperature(1.0).topK(3).topP(0.8).seed(12)), logits);
        assertClose(new double[] {0.5 / 0.8, 0.3 / 0.8, 0, 0}, freq);
    }

    @Test
    void minPDropsTokensBelowTheRatio() {
        float[] logits = logitsOf(0.5, 0.3, 0.15, 0.05);
        // threshold 0.2 * 0.5 = 0.1: the 0.05 token goes (plain path, no sorting)
        double[] freq = frequencies(new TokenSampler(Sampling.ofTemperature(1.0).minP(0.2).seed(13)), logits);
        assertClose(new double[] {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, freq);
        assertEquals(0.0, freq[3]);
        // through the sorting path: top-k 3 drops the 0.05 token, then 0.5 * 0.5 = 0.25 drops 0.15
        double[] sorted =
                frequencies(new TokenSampler(Sampling.ofTemperature(1.0).topK(4 - 1).minP(0.5).seed(14)), logits);
        assertClose(new double[] {0.5 / 0.8, 0.3 / 0.8, 0, 0}, sorted);
    }

    @Test
    void topKOfOneIsGreedy() {
        Random r = new Random(21);
        TokenSampler greedy = new TokenSampler(Sampling.greedy());
        TokenSampler k1 = new TokenSampler(Sampling.ofTemperature(1.5).topK(1).seed(1));
        for (int trial = 0; trial < 200; trial++) {
            float[] logits = randomLogits(1 + r.nextInt(3000), 4.0, r.nextLong());
            assertEquals(greedy.next(logits, null, 0), k1.next(logits, null, 0));
        }
    }

    @Test
    void tinyTopPIsGreedy() {
        Random r = new Random(22);
        TokenSampler greedy = new TokenSampler(Sampling.greedy());
        TokenSampler p = new TokenSampler(Sampling.ofTemperature(1.0).topP(1e-9).seed(2));
        for (int trial = 0; trial < 200; trial++) {
            float[] logits = randomLogits(1 + r.nextInt(3000), 4.0, r.nextLong());
            assertEquals(greedy.next(logits, null, 0), p.next(logits, null, 0));
        }
        // ties: the lowest id, as in greedy
        assertEquals(1, p.next(new float[] {0f, 5f, 5f}, null, 0));
    }

    @Test
    void nucleusReachingFarIntoTheTailIsStillExact() {
        // One token at 0 and 49,999 at -10 (ratio 4.5e-5, below the first cut): the 0.9 nucleus holds
        // the top token and most of the tail.
        int vocab = 50_000;
        float[] logits = new float[vocab];
        Arrays.fill(logits, -10f);
        logits[123] = 0f;
        double pTop = 1.0 / (1.0 + (vocab - 1) * Math.exp(-10));
        TokenSampler s = new TokenSampler(Sampling.ofTemperature(1.0).topP(0.9).seed(15));
        int top = 0;
        int n = 5000;
        for (int i = 0; i < n; i++) {
            if (s.next(logits, null, 0) == 123) {
                top++;
            }
        }
        assertEquals(pTop / 0.9, top / (double) n, 0.03);
    }

    @Test
    void filtersAgreeWithAReferenceImplementation() {
        Random r = new Random(23);
        for (int trial = 0; trial < 40; trial++) {
            int vocab = 2 + r.nextInt(4000);
            float[] logits = randomLogits(vocab, 1 + 4 * r.nextDouble(), r.nextLong());
            double t = 0.3 + 1.5 * r.nextDouble();
            int k = r.nextBoolean() ? 0 : 1 + r.nextInt(60);
            double p = r.nextBoolean() ? 1.0 : 0.2 + 0.79 * r.nextDouble();
            double minP = r.nextBoolean() ? 0.0 : 0.3 * r.nextDouble();
            Sampling sampling = Sampling.ofTemperature(t).topK(k).topP(p).minP(minP).seed(trial);
            Set<Integer> allowed = referenceKeptSet(logits, t, k, p, minP);
            TokenSampler s = new TokenSampler(sampling);
            Set<Integer> seen = new HashSet<>();
            for (int i = 0; i < 400; i++) {
                int id = s.next(logits, null, 0);
                assertTrue(allowed.contains(id), () -> sampling + " drew " + id + " outside " + allowed.size());
                seen.add(id);
            }
            if (allowed.size() == 1) {
                assertEquals(allowed, seen);
            }
        }
    }

    /** A boxed, sort-everything version of top-k, top-p and min-p, written for clarity. */
    private static Set<Integer> referenceKeptSet(float[] logits, double t, int k, double p, double minP) {
        List<Integer> ids = new ArrayList<>();
        for (int i = 0; i < logits.length; i++) {
            ids.add(i);
        }
        ids.sort(Comparator.comparingDouble((Integer i) -> -logits[i]).thenComparingInt(i -> i));
        int keep = ids.size();
        if (k > 0 && k < keep) {
            float kth = logits[ids.get(k - 1)];
            keep = k;
            while (keep < ids.size() && logits[ids.get(keep)] == kth) {
                keep++;
            }
        }
        double max = logits[ids.get(0)];
        double z = 0;
        for (int j = 0; j < keep; j++) {
            z += Math.exp((logits[ids.get(j)] - max) / t);
        }
        if (p < 1.0) {
            double cum = 0;
            for (int j = 0; j < keep; j++) {
                cum += Math.exp((logits[ids.get(j)] - max) / t) / z;
                if (cum >= p) {
                    keep = j + 1;
                    break;
                }
            }
        }
        Set<Integer> out = new HashSet<>();
        for (int j = 0; j < keep; j++) {
            if (j == 0 || Math.exp((logits[ids.get(j)] - max) / t) >= minP) {
                out.add(ids.get(j));
            }
        }
        return out;
    }

    // ------------------------------------------------------------------ repetition penalty

    @Test
    void repetitionPenaltyCanChangeTheArgmax() {
        float[] logits = {2.0f, 1.9f, -1.0f};
        assertEquals(0, new TokenSampler(Sampling.greedy()).next(logits, new int[] {0}, 1));
        TokenSampler penalised = new TokenSampler(Sampling.greedy().repetitionPenalty(1.2));
        assertEquals(1, penalised.next(logits, new int[] {0}, 1)); // 2.0 / 1.2 = 1.67 < 1.9
        assertEquals(0, penalised.next(logits, new int[] {0, 7}, 0)); // historyLength 0: nothing seen
    }

    @Test
    void repetitionPenaltyMultipliesNegativeLogits() {
        float[] logits = {-1.0f, -1.1f};
        TokenSampler penalised = new TokenSampler(Sampling.greedy().repetitionPenalty(1.2));
        assertEquals(1, penalised.next(logits, new int[] {0}, 1)); // -1.0 * 1.2 = -1.2 < -1.1
    }

    @Test
    void repetitionPenaltyCountsEachDistinctTokenOnce() {
        float[] logits = {2.0f, 1.5f};
        TokenSampler penalised = new TokenSampler(Sampling.greedy().repetitionPenalty(1.2));
        // once: 1.67 > 1.5; applied three times it would be 1.16 < 1.5
        assertEquals(0, penalised.next(logits, new int[] {0, 0, 0}, 3));
        // and the next call starts afresh
        assertEquals(0, penalised.next(logits, new int[] {0, 0, 0}, 3));
    }

    @Test
    void repetitionPenaltyBelowOneEncouragesRepeats() {
        float[] logits = {1.0f, 1.5f};
        assertEquals(0, new TokenSampler(Sampling.greedy().repetitionPenalty(0.5)).next(logits, new int[] {0}, 1));
    }

    // ------------------------------------------------------------------ bad input

    @Test
    void nanLogitsAreReported() {
        TokenSampler s = new TokenSampler(Sampling.ofTemperature(1.0));
        MambaException e = assertThrows(MambaException.class, () -> s.next(new float[] {0f, Float.NaN, 1f}, null, 0));
        assertTrue(e.getMessage().contains("NaN"), e.getMessage());
        assertTrue(e.getMessage().contains("token 1"), e.getMessage());
        assertThrows(MambaException.class, () -> new TokenSampler(Sampling.greedy()).next(new float[] {Float.NaN}, null, 0));
    }

    @Test
    void positiveInfinityAndAllMaskedAreReported() {
        TokenSampler s = new TokenSampler(Sampling.ofTemperature(1.0));
        MambaException inf = assertThrows(
                MambaException.class, () -> s.next(new float[] {0f, Float.POSITIVE_INFINITY}, null, 0));
        assertTrue(inf.getMessage().contains("Infinity"), inf.getMessage());
        float[] masked = {Float.NEGATIVE_INFINITY, Float.NEGATIVE_INFINITY};
        MambaException all = assertThrows(MambaException.class, () -> s.next(masked, null, 0));
        assertTrue(all.getMessage().contains("-Infinity"), all.getMessage());
    }

    @Test
    void maskedTokensAreNeverDrawn() {
        float[] logits = {Float.NEGATIVE_INFINITY, 0f, Float.NEGATIVE_INFINITY, 0f};
        for (Sampling sampling : new Sampling[] {
            Sampling.ofTemperature(1.0), Sampling.ofTemperature(1.0).topK(3), Sampling.ofTemperature(1.0).topP(0.99)
        }) {
            TokenSampler s = new TokenSampler(sampling);
            for (int i = 0; i < 500; i++) {
                int id = s.next(logits, null, 0);
                assertTrue(id == 1 || id == 3, sampling + " drew " + id);
            }
        }
    }

    @Test
    void argumentsAreChecked() {
        TokenSampler s = new TokenSampler(Sampling.greedy().repetitionPenalty(1.1));
        float[] logits = new float[4];
        assertThrows(IllegalArgumentException.class, () -> s.next(logits, 2, 3, null, 0));
        assertThrows(IllegalArgumentException.class, () -> s.next(logits, -1, 2, null, 0));
        assertThrows(IllegalArgumentException.class, () -> s.next(logits, 0, 0, null, 0));
        assertThrows(IllegalArgumentException.class, () -> s.next(logits, 0, 4, new int[] {1}, 2));
        assertThrows(IllegalArgumentException.class, () -> s.next(logits, 0, 4, new int[] {4}, 1));
        assertThrows(IllegalArgumentException.class, () -> s.next(logits, 0, 4, new int[] {-1}, 1));
        assertThrows(NullPointerException.class, () -> new TokenSampler(null));
    }

    @Test
    void largeVocabularyIsFast() {
        float[] logits = randomLogits(50_280, 3.0, 24);
        TokenSampler s = new TokenSampler(Sampling.ofTemperature(0.8).topK(50).topP(0.9).minP(0.02).seed(3));
        TokenSampler plain = new TokenSampler(Sampling.ofTemperature(0.8).topP(0.95).seed(3));
        for (int i = 0; i < 50; i++) { // warm up
            s.next(logits, null, 0);
            plain.next(logits, null, 0);
        }
        long start = System.nanoTime();
        for (int i = 0; i < 200; i++) {
            s.next(logits, null, 0);
            plain.next(logits, null, 0);
        }
        double msPerCall = (System.nanoTime() - start) / 1e6 / 400;
        assertTrue(msPerCall < 20, "sampling over 50,280 logits took " + msPerCall + " ms per call");
    }

    // ------------------------------------------------------------------ helpers

    private static int[] drawMany(TokenSampler s, float[] logits, int n) {
        int[] out = new int[n];
        for (int i = 0; i < n; i++) {
            out[i] = s.next(logits, null, 0);
        }
        return out;
    }

    private static double[] frequencies(TokenSampler s, float[] logits) {
        double[] f = new double[logits.length];
        for (int i = 0; i < DRAWS; i++) {
            f[s.next(logits, 0, logits.length, null, 0)]++;
        }
        for (int i = 0; i < f.length; i++) {
            f[i] /= DRAWS;
        }
        return f;
    }

    private static double[] softmax(float[] logits, double t) {
        double max = Double.NEGATIVE_INFINITY;
        for (float l : logits) {
            max = Math.max(max, l);
        }
        double[] p = new double[logits.length];
        double z = 0;
        for (int i = 0; i < p.length; i++) {
            p[i] = Math.exp((logits[i] - max) / t);
            z += p[i];
        }
        for (int i = 0; i < p.length; i++) {
            p[i] /= z;
        }
        return p;
    }

    private static double[] restrict(double[] p, int... keep) {
        double[] out = new double[p.length];
        double z = 0;
        for (int i : keep) {
            z += p[i];
        }
        for (int i : keep) {
            out[i] = p[i] / z;
        }
        return out;
    }

    private static float[] logitsOf(double... probabilities) {
        float[] l = new float[probabilities.length];
        for (int i = 0; i < l.length; i++) {
            l[i] = (float) Math.log(probabilities[i]);
        }
        return l;
    }

    private static float[] randomLogits(int vocab, double scale, long seed) {
        Random r = new Random(seed);
        float[] l = new float[vocab];
        for (int i = 0; i < vocab; i++) {
            l[i] = (float) (r.nextGaussian() * scale);
        }
        return l;
    }

    private static void assertClose(double[] expected, double[] actual) {
        for (int i = 0; i < expected.length; i++) {
            assertEquals(
                    expected[i], actual[i], TOLERANCE,
                    "token " + i + ": expected " + Arrays.toString(expected) + " got " + Arrays.toString(actual));
        }
    }
}
