package org.mamba4j.parallel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Test;
import org.mamba4j.AdamW;
import org.mamba4j.BackwardOptions;
import org.mamba4j.GemmMode;
import org.mamba4j.LossScaler;
import org.mamba4j.Mamba1Config;
import org.mamba4j.Mamba3Config;
import org.mamba4j.MambaModel;
import org.mamba4j.ModelConfig;
import org.mamba4j.StepResult;
import org.mamba4j.Trainer;

/**
 * The determinism definition of {@link DataParallelTrainer}, bit for bit on the CPU: N replicas in one process
 * (DETERMINISTIC, rank-order sum) give the same weights and gradient norms as ONE trainer of the same per-replica
 * batch that computes each of the N shards' gradients from zero (scale 1/N), adds them in rank order and steps —
 * over several steps, with global-norm clipping active, for MSE, cross-entropy (head) and language-model losses,
 * Mamba-1 and Mamba-3, N = 1…4.
 */
class DataParallelDeterminismTest {
    private static final int B = 2, T = 12, IN = 3, V = 5, STEPS = 4;
    private static final Mamba1Config M1 = Mamba1Config.builder().dModel(16).dState(4).layers(2).build();
    private static final Mamba3Config M3 = Mamba3Config.builder().dModel(16).headdim(8).dState(8).layers(2).chunkSize(8).build();

    /** MSE_HEAD: MSE through an output head of width 5, with a dynamic loss scaler whose scale grows during the test. */
    enum Loss { MSE, MSE_HEAD, CROSS_ENTROPY, TOKENS }

    private static MambaModel model(ModelConfig c, Loss loss, long seed) {
        MambaModel.Builder b = MambaModel.builder(c).seed(seed);
        return (loss == Loss.TOKENS ? b.vocabSize(V + 2) : b.inputDim(IN)).build();
    }

    private static Trainer trainer(MambaModel m, Loss loss) {
        Trainer.Builder b = Trainer.builder(m).batch(B).seqLen(T).gemmMode(GemmMode.DETERMINISTIC)
                .adamW(AdamW.ofLearningRate(5e-3).weightDecay(0.05)).clipGradNorm(0.05);  // small: clipping is active
        if (loss == Loss.CROSS_ENTROPY) b.crossEntropyHead(V).headSeed(9);
        if (loss == Loss.MSE_HEAD) b.outputHead(5).lossScaler(LossScaler.dynamic().withInitScale(256).withGrowth(2, 2));
        return b.build();
    }

    /** Shard r of global step k: a deterministic stream. */
    private static float[] inputs(int k, int r) {
        return random(new Random(100 * k + r), B * T * IN);
    }

    private static float[] targets(int k, int r, int width) {
        return random(new Random(7000 + 100 * k + r), B * T * width);
    }

    private static int[] classes(int k, int r, int range) {
        Random rng = new Random(9000 + 100 * k + r);
        int[] t = new int[B * T];
        for (int i = 0; i < t.length; i++) t[i] = i % 7 == 3 ? Trainer.DEFAULT_IGNORE_INDEX : rng.nextInt(range);
        return t;
    }

    private static int[] ids(int k, int r) {
        Random rng = new Random(11000 + 100 * k + r);
        int[] t = new int[B * T];
        for (int i = 0; i < t.length; i++) t[i] = rng.nextInt(V + 2);
        return t;
    }

    private static float[] random(Random rng, int n) {
        float[] a = new float[n];
        for (int i = 0; i < n; i++) a[i] = (float) rng.nextGaussian();
        return a;
    }

    /**
     * The reference, on ONE trainer: each shard's gradient from a zero gradient (scale 1/N), the N gradients added in
     * rank order, ((g0 + g1) + g2) + … (this test's own loop), then one optimizer step.
     */
    private static StepResult referenceStep(Trainer t, Loss loss, int k, int n) {
        List<float[]> shardGradients = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            t.zeroGrad();
            runShard(t, loss, k, r, n);
            shardGradients.add(t.gradients());
        }
        t.setGradients(rankOrderSum(shardGradients));
        return t.optimizerStep();
    }

    private static void runShard(Trainer t, Loss loss, int k, int r, int n) {
        BackwardOptions micro = BackwardOptions.accumulate().scale(1.0 / n);
        switch (loss) {
            case MSE, MSE_HEAD -> t.stepMse(inputs(k, r), targets(k, r, t.outputWidth()), micro);
            case CROSS_ENTROPY -> t.stepCrossEntropy(inputs(k, r), classes(k, r, V), micro);
            case TOKENS -> t.stepTokens(ids(k, r), classes(k, r, V + 2), micro);
        }
    }

    static float[] rankOrderSum(List<float[]> parts) {
        float[] sum = new float[parts.get(0).length];
        for (int i = 0; i < sum.length; i++) {
            float acc = parts.get(0)[i];
            for (int r = 1; r < parts.size(); r++) acc += parts.get(r)[i];
            sum[i] = acc;
        }
        return sum;
    }

    private static StepResult dataParallelStep(DataParallelTrainer dp, Loss loss, int k, int n, int width) {
        List<float[]> xs = new ArrayList<>(), ys = new ArrayList<>();
        List<int[]> cs = new ArrayList<>(), is = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            xs.add(inputs(k, r));
            ys.add(targets(k, r, width));
            cs.add(classes(k, r, loss == Loss.TOKENS ? V + 2 : V));
            is.add(ids(k, r));
        }
        return switch (loss) {
            case MSE, MSE_HEAD -> dp.stepMse(concat(xs), concat(ys));
            case CROSS_ENTROPY -> dp.stepCrossEntropy(concat(xs), concatInts(cs));
            case TOKENS -> dp.stepTokens(concatInts(is), concatInts(cs));
        };
    }

    static float[] concat(List<float[]> parts) {
        int n = parts.stream().mapToInt(p -> p.length).sum(), off = 0;
        float[] out = new float[n];
        for (float[] p : parts) {
            System.arraycopy(p, 0, out, off, p.length);
            off += p.length;
        }
        return out;
    }

    static int[] concatInts(List<int[]> parts) {
        int n = parts.stream().mapToInt(p -> p.length).sum(), off = 0;
        int[] out = new int[n];
        for (int[] p : parts) {
            System.arraycopy(p, 0, out, off, p.length);
            off += p.length;
        }
        return out;
    }

    static void assertSameWeights(Trainer expected, Trainer actual, String what) {
        for (String name : expected.model().parameterNames())
            assertArrayEquals(expected.model().getParameter(name), actual.model().getParameter(name), what + ": " + name);
        if (expected.vocab() > 0 || expected.outputHeadWidth() > 0) {
            assertArrayEquals(expected.head().weight(), actual.head().weight(), what + ": lm_head.weight");
            assertArrayEquals(expected.head().bias(), actual.head().bias(), what + ": lm_head.bias");
        }
    }

    private static void check(ModelConfig config, Loss loss, int n) {
        List<MambaModel> models = new ArrayList<>();
        List<Trainer> replicas = new ArrayList<>();
        // replicas from different seeds: joining the group gives them rank 0's weights
        for (int r = 0; r < n; r++) models.add(model(config, loss, 42 + 1000L * r));
        try (MambaModel refModel = model(config, loss, 42); Trainer ref = trainer(refModel, loss)) {
            for (MambaModel m : models) replicas.add(trainer(m, loss));
            try (DataParallelTrainer dp = DataParallelTrainer.inProcess(replicas)) {
                assertEquals(Reduction.RANK_ORDER, dp.reduction());
                for (Trainer t : replicas) assertSameWeights(ref, t, "after joining");
                boolean clipped = false;
                for (int k = 0; k < STEPS; k++) {
                    StepResult want = referenceStep(ref, loss, k, n);
                    StepResult got = dataParallelStep(dp, loss, k, n, ref.outputWidth());
                    assertEquals(want.lossScale(), got.lossScale(), 0.0, "step " + k + ": the loss scale");
                    assertTrue(got.optimizerStepped() && !got.skipped(), "step " + k + ": " + got);
                    assertEquals(want.step(), got.step());
                    assertEquals(want.gradNorm(), got.gradNorm(), 0.0, "step " + k + ": the combined gradient's norm");
                    clipped |= got.gradNorm() > 0.05;
                    assertFalse(Double.isNaN(got.loss()), "a global loss is reported");
                    for (int r = 0; r < n; r++) assertSameWeights(ref, replicas.get(r), "step " + k + ", replica " + r);
                }
                assertTrue(clipped, "clipping was active in at least one step");
            }
        } finally {
            replicas.forEach(Trainer::close);
            models.forEach(MambaModel::close);
        }
    }

    @ParameterizedTest(name = "Mamba-1, MSE, {0} replicas")
    @ValueSource(ints = {1, 2, 3, 4})
    void mamba1MseIsBitIdenticalToOneTrainer(int n) {
        check(M1, Loss.MSE, n);
    }

    @ParameterizedTest(name = "Mamba-1, output head + loss scaler, {0} replicas")
    @ValueSource(ints = {2, 3})
    void mamba1OutputHeadWithLossScalingIsBitIdenticalToOneTrainer(int n) {
        check(M1, Loss.MSE_HEAD, n);
    }

    @ParameterizedTest(name = "Mamba-1, cross-entropy head, {0} replicas")
    @ValueSource(ints = {2, 3})
    void mamba1CrossEntropyIsBitIdenticalToOneTrainer(int n) {
        check(M1, Loss.CROSS_ENTROPY, n);
    }

    @ParameterizedTest(name = "Mamba-3, MSE, {0} replicas")
    @ValueSource(ints = {2, 4})
    void mamba3MseIsBitIdenticalToOneTrainer(int n) {
        check(M3, Loss.MSE, n);
    }

    @ParameterizedTest(name = "Mamba-3 language model, tokens, {0} replicas")
    @ValueSource(ints = {2, 3})
    void mamba3TokensAreBitIdenticalToOneTrainer(int n) {
        check(M3, Loss.TOKENS, n);
    }

    @ParameterizedTest(name = "Mamba-1 language model, tokens, {0} replicas")
    @ValueSource(ints = {2})
    void mamba1TokensAreBitIdenticalToOneTrainer(int n) {
        check(M1, Loss.TOKENS, n);
    }

    /**
     * What {@code sumGradients} leaves in every replica is the rank-order sum of the shards' own gradients. (It is not,
     * for every tensor, what one trainer holds after accumulating the shards as micro-batches: its conv and embedding
     * backward add each row into the running gradient, so ((G0 + a) + b) ≠ G0 + (a + b) in the last bits — hence the
     * definition is the fold of per-shard gradients, which every communicator and one trainer can both compute.)
     */
    @Test
    void sumGradientsLeavesTheRankOrderSumOfTheShardGradients() throws InterruptedException {
        int n = 3;
        List<InProcessCommunicator> group = InProcessCommunicator.group(n);
        List<MambaModel> models = new ArrayList<>();
        List<Trainer> replicas = new ArrayList<>();
        try {
            List<float[]> shardGradients = new ArrayList<>();
            for (int r = 0; r < n; r++) {
                models.add(model(M1, Loss.CROSS_ENTROPY, 42));
                replicas.add(trainer(models.get(r), Loss.CROSS_ENTROPY));
                runShard(replicas.get(r), Loss.CROSS_ENTROPY, 0, r, n);
                shardGradients.add(replicas.get(r).gradients());
            }
            List<Thread> threads = new ArrayList<>();
            for (int r = 0; r < n; r++) {
                int rank = r;
                Thread th = new Thread(() -> group.get(rank).sumGradients(replicas.get(rank), Reduction.RANK_ORDER));
                th.start();
                threads.add(th);
            }
            for (Thread th : threads) th.join();
            float[] want = rankOrderSum(shardGradients);
            for (int r = 0; r < n; r++) assertArrayEquals(want, replicas.get(r).gradients(), "replica " + r);
        } finally {
            replicas.forEach(Trainer::close);
            models.forEach(MambaModel::close);
            group.forEach(InProcessCommunicator::close);
        }
    }

    /**
     * Against ONE trainer of batch N·b in one call the gradients agree to f32 rounding, not bit for bit (that trainer
     * sums the weight gradients over all rows inside its products): the mean-of-shard-means scaling is right.
     */
    @Test
    void matchesOneTrainerOfTheGlobalBatchToRounding() {
        int n = 2;
        List<InProcessCommunicator> group = InProcessCommunicator.group(n);
        List<MambaModel> models = new ArrayList<>();
        List<Trainer> replicas = new ArrayList<>();
        try (MambaModel bigModel = model(M1, Loss.MSE, 42);
             Trainer big = Trainer.builder(bigModel).batch(n * B).seqLen(T).gemmMode(GemmMode.DETERMINISTIC).build()) {
            for (int r = 0; r < n; r++) {
                models.add(model(M1, Loss.MSE, 42));
                replicas.add(trainer(models.get(r), Loss.MSE));
            }
            List<float[]> xs = new ArrayList<>(), ys = new ArrayList<>();
            for (int r = 0; r < n; r++) {
                xs.add(inputs(0, r));
                ys.add(targets(0, r, bigModel.outputWidth()));
                replicas.get(r).stepMse(xs.get(r), ys.get(r), BackwardOptions.accumulate().scale(1.0 / n));
            }
            big.stepMse(concat(xs), concat(ys), BackwardOptions.accumulate());
            List<Thread> threads = new ArrayList<>();
            for (int r = 0; r < n; r++) {
                int rank = r;
                Thread th = new Thread(() -> group.get(rank).sumGradients(replicas.get(rank), Reduction.RANK_ORDER));
                th.start();
                threads.add(th);
            }
            for (Thread th : threads) th.join();
            float[] want = big.gradients(), got = replicas.get(0).gradients();
            double num = 0, den = 0;
            for (int i = 0; i < want.length; i++) {
                num += (double) (want[i] - got[i]) * (want[i] - got[i]);
                den += (double) want[i] * want[i];
            }
            double rel = Math.sqrt(num / den);
            assertTrue(rel < 1e-5, "relative L2 difference " + rel);
        } catch (InterruptedException e) {
            throw new AssertionError(e);
        } finally {
            replicas.forEach(Trainer::close);
            models.forEach(MambaModel::close);
            group.forEach(InProcessCommunicator::close);
        }
    }
}
