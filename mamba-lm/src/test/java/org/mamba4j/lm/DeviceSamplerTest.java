package org.mamba4j.lm;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.DeviceSampler;
import org.mamba4j.GemmMode;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaException;
import org.mamba4j.MambaModel;
import org.mamba4j.MambaState;

/**
 * libmamba's sampler ({@link DeviceSampler}) on the CPU against the Java {@link TokenSampler}: the same token for
 * every draw and the same random state after it, over many seeds, vocabularies up to 50,280, every option alone and
 * combined, ties, -Infinity bans, long tails, histories; NaN/+Inf/all -Inf rows rejected with the same kind of
 * error; bad input refused. {@link #sameStreams} also runs on CUDA ({@code DeviceSamplingGpuTest}).
 */
class DeviceSamplerTest {

    /** Settings exercising every option alone and together (temperature 0 included). */
    static List<Sampling> settings() {
        List<Sampling> s = new ArrayList<>();
        s.add(Sampling.greedy());
        s.add(Sampling.greedy().repetitionPenalty(1.3));
        s.add(Sampling.ofTemperature(1.0));
        s.add(Sampling.ofTemperature(0.6));
        s.add(Sampling.ofTemperature(1.7).topK(40));
        s.add(Sampling.ofTemperature(1.0).topK(1));
        s.add(Sampling.ofTemperature(1.0).topK(3));
        s.add(Sampling.ofTemperature(1.2).topP(0.9));
        s.add(Sampling.ofTemperature(1.0).topP(0.5));
        s.add(Sampling.ofTemperature(2.0).topP(0.999));
        s.add(Sampling.ofTemperature(0.9).minP(0.05));
        s.add(Sampling.ofTemperature(0.8).topK(50).topP(0.95).minP(0.02).repetitionPenalty(1.2));
        s.add(Sampling.ofTemperature(1.0).topK(20).topP(0.7));
        s.add(Sampling.ofTemperature(1.0).repetitionPenalty(0.7));
        s.add(Sampling.ofTemperature(1e-3).topP(0.9));
        return s;
    }

    /** How a row's logits are made. */
    enum Shape { RANDOM, TIES, FLAT, LONG_TAIL, BANNED }

    static float[] logits(Random r, Shape shape, int vocab) {
        float[] x = new float[vocab];
        for (int i = 0; i < vocab; i++) {
            switch (shape) {
                case TIES: x[i] = r.nextInt(4) - 1.5f; break;
                case FLAT: x[i] = 0.25f; break;
                case LONG_TAIL: x[i] = -11f + (float) r.nextGaussian() * 0.3f; break;
                default: x[i] = (float) (r.nextGaussian() * 3);
            }
        }
        if (shape == Shape.LONG_TAIL) x[r.nextInt(vocab)] = 0f;
        if (shape == Shape.BANNED)
            for (int i = 0; i < vocab; i++) if (r.nextInt(3) == 0) x[i] = Float.NEGATIVE_INFINITY;
        return x;
    }

    /**
     * For each setting and shape: {@code rows} rows (different seeds and histories) drawn {@code draws} times on the
     * native sampler and with one TokenSampler per row (history = the row's start history plus its draws); every
     * token and every random state must be equal. Returns how many draws were compared.
     */
    static int sameStreams(Device device, int vocab, int rowWidth, int rows, int draws, long seed) {
        Random r = new Random(seed);
        int compared = 0;
        try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(8).dState(4).layers(1).build())
                .vocabSize(rowWidth).device(device).dtype(DType.F32).build();
             DeviceSampler native_ = m.newSampler(rows, vocab)) {
            for (Sampling setting : settings()) {
                for (Shape shape : Shape.values()) {
                    TokenSampler[] host = new TokenSampler[rows];
                    int[][] history = new int[rows][];
                    int[] length = new int[rows];
                    for (int b = 0; b < rows; b++) {
                        long s = r.nextLong();
                        host[b] = new TokenSampler(setting, s);
                        int h = r.nextInt(3) == 0 ? 0 : 1 + r.nextInt(Math.min(vocab, 200));
                        history[b] = new int[h + draws];
                        for (int j = 0; j < h; j++) history[b][j] = r.nextInt(vocab);
                        length[b] = h;
                        native_.setRow(b, setting.temperature(), setting.topK(), setting.topP(), setting.minP(),
                                setting.repetitionPenalty(), s, Arrays.copyOf(history[b], h));
                    }
                    for (int d = 0; d < draws; d++) {
                        float[] all = new float[rows * rowWidth];
                        for (int b = 0; b < rows; b++) {
                            float[] x = logits(r, shape, vocab);
                            x[r.nextInt(vocab)] = 1f;  // never all -Infinity
                            System.arraycopy(x, 0, all, b * rowWidth, vocab);
                            for (int i = vocab; i < rowWidth; i++) all[b * rowWidth + i] = 1e30f;  // padding: never read
                        }
                        int[] got = native_.sample(all, rowWidth);
                        for (int b = 0; b < rows; b++) {
                            int want = host[b].next(all, b * rowWidth, vocab, history[b], length[b]);
                            history[b][length[b]++] = want;
                            String where = setting + " " + shape + " vocab " + vocab + " row " + b + " draw " + d;
                            assertEquals(want, got[b], where);
                            assertEquals(host[b].randomState(), native_.randomState(b), where);
                            compared++;
                        }
                    }
                }
            }
        }
        return compared;
    }

    @Test
    void nativeSamplerGivesTheHostSamplersTokensForEverySettingAndVocabulary() {
        int compared = 0;
        for (int vocab : new int[] {1, 2, 7, 1000, 1024, 1025, 4099}) compared += sameStreams(Device.cpu(), vocab, vocab + 3, 4, 3, vocab);
        compared += sameStreams(Device.cpu(), 50280, 50280, 2, 2, 50280);
        assertTrue(compared > 2000, "compared " + compared);
    }

    /**
     * Shared native state: the CPU sampler keeps each row's scratch per thread (pool workers included), reused across
     * calls and vocabularies. Two models sampling at the same time from two threads, with different vocabularies and
     * batches spread over the pool, must each still give the host sampler's tokens and random states.
     */
    @Test
    void twoModelsSampleFromTwoThreadsAtOnce() throws Exception {
        ExecutorService threads = Executors.newFixedThreadPool(2);
        try {
            Future<Integer> small = threads.submit(() -> sameStreams(Device.cpu(), 4099, 4102, 8, 3, 21));
            Future<Integer> large = threads.submit(() -> sameStreams(Device.cpu(), 50280, 50280, 4, 2, 22));
            int perDraw = settings().size() * Shape.values().length;
            assertEquals(perDraw * 8 * 3, small.get());
            assertEquals(perDraw * 4 * 2, large.get());
        } finally {
            threads.shutdownNow();
        }
    }

    @Test
    void manySeedsGiveTheSameStream() {
        Sampling s = Sampling.ofTemperature(1.0).topP(0.9).topK(30);
        Random r = new Random(4);
        try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(8).dState(4).layers(1).build())
                .vocabSize(300).device(Device.cpu()).build();
             DeviceSampler ds = m.newSampler(1, 300)) {
            Set<Integer> distinct = new HashSet<>();
            for (int seed = 0; seed < 200; seed++) {
                TokenSampler host = new TokenSampler(s, seed * 7919L - 100);
                ds.setRow(0, 1.0, 30, 0.9, 0.0, 1.0, seed * 7919L - 100, new int[0]);
                float[] x = logits(r, Shape.RANDOM, 300);
                int want = host.next(x, new int[0], 0);
                distinct.add(want);
                // history: the host sampler sees no history (penalty off), the native one its draw: irrelevant here
                assertEquals(want, ds.sample(x, 300)[0], "seed " + seed);
            }
            assertTrue(distinct.size() > 5, "the draws should vary with the seed: " + distinct);
        }
    }

    @Test
    void topPSplitsATieGroupKeepingTheLowerIds() {
        // The documented rule: the running sum over (logit desc, id asc) stops at the token reaching topP, so of four
        // tied tokens (weights 1, the -5 one e^-7) topP 0.45 keeps ids 1 and 3 (the banned 0 and 2 aside: 5, 6 tie too but come later).
        float[] x = {Float.NEGATIVE_INFINITY, 2f, Float.NEGATIVE_INFINITY, 2f, -5f, 2f, 2f};
        Sampling s = Sampling.ofTemperature(1.0).topP(0.45);
        try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(8).dState(4).layers(1).build())
                .vocabSize(7).device(Device.cpu()).build();
             DeviceSampler ds = m.newSampler(1, 7)) {
            int[] count = new int[7];
            for (int seed = 0; seed < 400; seed++) {
                TokenSampler host = new TokenSampler(s, seed);
                ds.setRow(0, 1.0, 0, 0.45, 0.0, 1.0, seed, new int[0]);
                int tok = host.next(x, null, 0);
                assertEquals(tok, ds.sample(x, 7)[0]);
                count[tok]++;
            }
            assertEquals(400, count[1] + count[3], Arrays.toString(count));
            assertTrue(count[1] > 150 && count[3] > 150, Arrays.toString(count));
        }
    }

    @Test
    void theRandomStreamIsSplittableRandoms() {
        // TokenSampler reimplements SplittableRandom so that the state can move to the device: it must be the same.
        Sampling flat = Sampling.ofTemperature(1.0);
        float[] x = new float[1 << 20];  // equal weights: token = floor(u · 2^20) whatever the tree
        for (long seed : new long[] {0, 42, -7, Long.MIN_VALUE}) {
            SplittableRandom ref = new SplittableRandom(seed);
            TokenSampler s = new TokenSampler(flat, seed);
            for (int i = 0; i < 20; i++) {
                int want = (int) (ref.nextDouble() * (1 << 20));
                assertEquals(want, s.next(x, null, 0), "seed " + seed + " draw " + i);
            }
            assertEquals(seed + 20 * 0x9e3779b97f4a7c15L, s.randomState());
        }
    }

    @Test
    void exp64IsAccurateAndExactAtZero() {
        assertEquals(1.0, TokenSampler.exp64(0.0));
        assertEquals(1.0, TokenSampler.exp64(-0.0));
        assertEquals(0.0, TokenSampler.exp64(-709.0));
        Random r = new Random(3);
        double worst = 0;
        for (int i = 0; i < 100_000; i++) {
            double d = -r.nextDouble() * (i % 2 == 0 ? 30 : 708);
            worst = Math.max(worst, Math.abs(TokenSampler.exp64(d) - StrictMath.exp(d)) / StrictMath.exp(d));
        }
        assertTrue(worst < 4e-16, "relative error " + worst);
    }

    @Test
    void rejectedRowsThrowLikeTheHostSampler() {
        try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(8).dState(4).layers(1).build())
                .vocabSize(10).device(Device.cpu()).build();
             DeviceSampler ds = m.newSampler(2, 10)) {
            float[] x = new float[20];
            x[13] = Float.NaN;
            MambaException nan = assertThrows(MambaException.class, () -> ds.sample(x, 10));
            assertTrue(nan.getMessage().contains("row 1") && nan.getMessage().contains("token 3") && nan.getMessage().contains("NaN"),
                    nan.getMessage());
            x[13] = Float.POSITIVE_INFINITY;
            assertTrue(assertThrows(MambaException.class, () -> ds.sample(x, 10)).getMessage().contains("+Infinity"));
            Arrays.fill(x, 0, 10, Float.NEGATIVE_INFINITY);
            x[13] = 0f;
            assertTrue(assertThrows(MambaException.class, () -> ds.sample(x, 10)).getMessage().contains("-Infinity"));
            // the host sampler rejects the same rows
            TokenSampler host = new TokenSampler(Sampling.greedy());
            assertThrows(MambaException.class, () -> host.next(x, 0, 10, null, 0));
        }
    }

    @Test
    void badInputIsRefused() {
        MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(8).dState(4).layers(1).build())
                .vocabSize(10).device(Device.cpu()).build();
        DeviceSampler ds = m.newSampler(2, 8);
        MambaState st = m.newState(2);
        assertThrows(IllegalArgumentException.class, () -> m.newSampler(2, 11));
        assertThrows(IllegalArgumentException.class, () -> m.newSampler(0, 5));
        assertThrows(IllegalArgumentException.class, () -> ds.setRow(0, -1, 0, 1, 0, 1, 0, new int[0]));
        assertThrows(IllegalArgumentException.class, () -> ds.setRow(0, Double.NaN, 0, 1, 0, 1, 0, new int[0]));
        assertThrows(IllegalArgumentException.class, () -> ds.setRow(0, 1, -1, 1, 0, 1, 0, new int[0]));
        assertThrows(IllegalArgumentException.class, () -> ds.setRow(0, 1, 0, 0, 0, 1, 0, new int[0]));
        assertThrows(IllegalArgumentException.class, () -> ds.setRow(0, 1, 0, 1.5, 0, 1, 0, new int[0]));
        assertThrows(IllegalArgumentException.class, () -> ds.setRow(0, 1, 0, 1, 1, 1, 0, new int[0]));
        assertThrows(IllegalArgumentException.class, () -> ds.setRow(0, 1, 0, 1, 0, 0, 0, new int[0]));
        assertThrows(IllegalArgumentException.class, () -> ds.setRow(0, 1, 0, 1, 0, 1, 0, new int[] {8}));
        assertThrows(IndexOutOfBoundsException.class, () -> ds.setRow(2, 1, 0, 1, 0, 1, 0, new int[0]));
        assertThrows(IllegalArgumentException.class, () -> ds.sample(new float[15], 8));
        assertThrows(IllegalArgumentException.class, () -> ds.sample(new float[14], 7));
        assertThrows(IllegalArgumentException.class, () -> m.stepTokensSample(st, ds, new int[] {1}, new int[2]));
        assertThrows(IllegalArgumentException.class, () -> m.stepTokensSample(st, ds, new int[] {1, 2}, new int[1]));
        assertThrows(IllegalArgumentException.class, () -> m.stepTokensSample(st, ds, new int[] {1, 10}, new int[2]));
        try (DeviceSampler one = m.newSampler(1, 8)) {
            assertThrows(IllegalArgumentException.class, () -> m.stepTokensSample(st, one, new int[] {1, 2}, new int[2]));
        }
        try (MambaModel other = MambaModel.builder(Mamba1Config.builder().dModel(8).dState(4).layers(1).build())
                .vocabSize(10).device(Device.cpu()).build();
             DeviceSampler foreign = other.newSampler(2, 8)) {
            assertThrows(IllegalArgumentException.class, () -> m.stepTokensSample(st, foreign, new int[] {1, 2}, new int[2]));
        }
        int[] next = new int[2];
        m.stepTokensSample(st, ds, new int[] {1, 2}, next);  // valid: greedy rows
        assertTrue(next[0] >= 0 && next[0] < 8 && next[1] >= 0 && next[1] < 8);
        ds.close();
        ds.close();  // idempotent
        assertThrows(IllegalStateException.class, () -> ds.sample(new float[16], 8));
        assertThrows(IllegalStateException.class, () -> m.stepTokensSample(st, ds, new int[] {1, 2}, next));
        DeviceSampler after = m.newSampler(2, 8);
        m.close();
        assertThrows(IllegalStateException.class, () -> after.randomState(0));
        after.close();
        st.close();
    }

    @Test
    void stepTokensSampleEqualsStepTokensThenTheHostSampler() {
        for (GemmMode mode : new GemmMode[] {GemmMode.CUBLAS_FAST, GemmMode.DETERMINISTIC}) {
            try (MambaLM lm = TinyLanguageModels.lm(TinyLanguageModels.mamba1(), Device.cpu(), mode, false)) {
                stepsAgree(lm);
            }
        }
        try (MambaLM lm = TinyLanguageModels.lm(TinyLanguageModels.mamba3(), Device.cpu(), GemmMode.CUBLAS_FAST, false)) {
            stepsAgree(lm);
        }
    }

    /** Prefill + steps with the native sampler equal the logits path + TokenSampler, token for token. */
    static void stepsAgree(MambaLM lm) {
        MambaModel m = lm.model();
        int B = 3, T = 5, V = m.vocabSize(), vocab = lm.vocabSize();
        Sampling s = Sampling.ofTemperature(1.1).topK(12).topP(0.9).repetitionPenalty(1.15).seed(9);
        Random r = new Random(2);
        int[] prompt = new int[B * T];
        for (int i = 0; i < prompt.length; i++) prompt[i] = r.nextInt(vocab);
        try (MambaState a = m.newState(B); MambaState h = m.newState(B); DeviceSampler ds = m.newSampler(B, vocab)) {
            TokenSampler[] host = new TokenSampler[B];
            int[][] hist = new int[B][T + 40];
            for (int b = 0; b < B; b++) {
                host[b] = new TokenSampler(s, s.seed() + b);
                System.arraycopy(prompt, b * T, hist[b], 0, T);
                ds.setRow(b, s.temperature(), s.topK(), s.topP(), s.minP(), s.repetitionPenalty(), s.seed() + b,
                        Arrays.copyOfRange(prompt, b * T, b * T + T));
            }
            int[] next = new int[B];
            m.prefillTokensSample(a, ds, prompt, T, next);
            float[] logits = new float[B * V];
            m.prefillTokens(h, prompt, T, logits);
            int[] want = new int[B];
            for (int step = 0; step < 40; step++) {
                for (int b = 0; b < B; b++) {
                    want[b] = host[b].next(logits, b * V, vocab, hist[b], T + step);
                    hist[b][T + step] = want[b];
                }
                assertArrayEquals(want, next, "step " + step);
                m.stepTokensSample(a, ds, next, next);
                m.stepTokens(h, want, logits);
            }
        }
    }

    @Test
    void generateSamplesTheSameTokensOnTheDeviceAsOnTheHost() {
        try (MambaLM lm = TinyLanguageModels.lm(TinyLanguageModels.mamba1(), Device.cpu(), GemmMode.CUBLAS_FAST, false)) {
            generatesAgree(lm);
        }
    }

    @Test
    void batchedPrefillGivesEachPromptItsSoloTokens() {
        // DETERMINISTIC products are batch-invariant, so a row of a batch must equal its prompt generated alone.
        try (MambaLM lm = TinyLanguageModels.lm(TinyLanguageModels.mamba1(), Device.cpu(), GemmMode.DETERMINISTIC, false)) {
            Random r = new Random(12);
            int[][] prompts = {TinyLanguageModels.prompt(r, 4), TinyLanguageModels.prompt(r, 7), TinyLanguageModels.prompt(r, 4),
                TinyLanguageModels.prompt(r, 7), TinyLanguageModels.prompt(r, 2)};
            Sampling s = Sampling.ofTemperature(0.9).topP(0.95).maxNewTokens(20).seed(3);
            for (boolean device : new boolean[] {true, false}) {
                lm.setDeviceSampling(device);
                int[][] batch = lm.generate(prompts, s, (row, tok) -> { });
                for (int b = 0; b < prompts.length; b++)
                    assertArrayEquals(lm.generate(prompts[b], s, (row, tok) -> { }), batch[b], "row " + b + " device " + device);
                int[][] same = lm.generate(new int[][] {prompts[0], prompts[2]}, s, (row, tok) -> { });
                assertArrayEquals(batch[0], same[0]);
                assertArrayEquals(batch[2], same[1]);
            }
        }
    }

    /** generate with device sampling equals generate with host sampling: equal-length and mixed-length prompts. */
    static void generatesAgree(MambaLM lm) {
        Random r = new Random(8);
        int[][] equal = {TinyLanguageModels.prompt(r, 6), TinyLanguageModels.prompt(r, 6), TinyLanguageModels.prompt(r, 6)};
        int[][] mixed = {TinyLanguageModels.prompt(r, 3), TinyLanguageModels.prompt(r, 9), TinyLanguageModels.prompt(r, 3),
            TinyLanguageModels.prompt(r, 1)};
        for (Sampling s : settings()) {
            Sampling run = s.maxNewTokens(25).seed(77).stopTokens(5);
            for (int[][] prompts : new int[][][] {equal, mixed}) {
                lm.setDeviceSampling(true);
                int[][] device = lm.generate(prompts, run, (row, tok) -> { });
                lm.setDeviceSampling(false);
                int[][] host = lm.generate(prompts, run, (row, tok) -> { });
                lm.setDeviceSampling(true);
                for (int b = 0; b < prompts.length; b++) assertArrayEquals(host[b], device[b], run + " row " + b);
            }
        }
    }
}
