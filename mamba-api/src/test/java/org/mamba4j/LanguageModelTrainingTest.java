package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.function.DoubleSupplier;
import org.junit.jupiter.api.Test;

/**
 * Training language models ({@code vocabSize > 0}) on the CPU backend: {@link Trainer#stepTokens}.
 *
 * <p>Gradients: the loss is the mean softmax cross-entropy of the model's own head over the positions whose
 * target is not ignored. Mamba-1: every element of every tensor (the embedding included, tied and untied)
 * against central differences of the independent double forward {@link Mamba1TrainReference} (h = 1e-5,
 * rel L2 per tensor < 1e-3). Mamba-3 SISO: every tensor against the analytic double backward of
 * {@link Mamba3Reference} (rel L2 per tensor < 1e-4). Then learning, determinism over thread counts, exact
 * resume, the ignore index and argument checks.
 */
class LanguageModelTrainingTest {
    private static final long SEED = 20260401L;
    private static final double H = 1e-5, FD_TOL = 1e-3, REF_TOL = 1e-4;
    private static final String EMB = "backbone.embeddings.weight", HEAD = "lm_head.weight";

    static MambaModel mamba1Lm(int vocab, boolean tied, Random rng) {
        MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(8).dState(4).dConv(3).expand(2).dtRank(2)
                .layers(2).build()).vocabSize(vocab).tieEmbeddings(tied).seed(rng.nextLong()).build();
        TestUtil.randomizeWeights(m, rng);
        return m;
    }

    static Mamba3Config mamba3Small() {
        return Mamba3Config.builder().dModel(8).expand(2).headdim(4).dState(6).ngroups(2).layers(2).outprojNorm(true)
                .chunkSize(8).build();
    }

    /** Ids with 0, vocab − 1 and repeats; targets the next id, some positions ignored. */
    static int[][] tokens(Random rng, int B, int T, int vocab, int ignore) {
        int[] ids = new int[B * T], targets = new int[B * T];
        for (int i = 0; i < ids.length; i++) ids[i] = rng.nextInt(vocab);
        ids[0] = 0;
        ids[1] = vocab - 1;
        ids[2] = vocab - 1;
        ids[ids.length - 1] = 0;
        for (int i = 0; i < ids.length; i++) targets[i] = i % 5 == 3 ? ignore : rng.nextInt(vocab);
        return new int[][] {ids, targets};
    }

    /** Mean cross-entropy of logits [rows, V] over non-ignored rows; fills dLogits (for that mean) when not null. */
    static double crossEntropy(double[] logits, int V, int[] targets, int ignore, double[] dLogits) {
        double loss = 0;
        int counted = 0;
        for (int t : targets) if (t != ignore) counted++;
        for (int r = 0; r < targets.length; r++) {
            if (targets[r] == ignore) continue;
            double max = Double.NEGATIVE_INFINITY, sum = 0;
            for (int k = 0; k < V; k++) max = Math.max(max, logits[r * V + k]);
            for (int k = 0; k < V; k++) sum += Math.exp(logits[r * V + k] - max);
            loss += Math.log(sum) + max - logits[r * V + targets[r]];
            if (dLogits != null) {
                for (int k = 0; k < V; k++) dLogits[r * V + k] = Math.exp(logits[r * V + k] - max) / sum / counted;
                dLogits[r * V + targets[r]] -= 1.0 / counted;
            }
        }
        return loss / counted;
    }

    /** The Mamba-1 LM loss in double: embedding rows → backbone → head (tied: the embedding) → cross-entropy. */
    static double mamba1LmLoss(Mamba1TrainReference ref, int V, boolean tied, int[] ids, int[] targets, int ignore, int B, int T) {
        int D = ref.dModel;
        double[] emb = ref.w.get(EMB), head = ref.w.get(tied ? EMB : HEAD);
        double[] x = new double[B * T * D];
        for (int r = 0; r < B * T; r++) System.arraycopy(emb, ids[r] * D, x, r * D, D);
        double[] y = ref.forward(x, B, T, ref.zeroState(B));
        double[] logits = new double[B * T * V];
        for (int r = 0; r < B * T; r++)
            for (int v = 0; v < V; v++) {
                double s = 0;
                for (int i = 0; i < D; i++) s += head[v * D + i] * y[r * D + i];
                logits[r * V + v] = s;
            }
        return crossEntropy(logits, V, targets, ignore, null);
    }


    @Test
    void mamba1EveryGradientMatchesCentralDifferencesTiedAndUntied() {
        Random rng = new Random(SEED);
        int B = 2, T = 5, V = 7, IGNORE = -1;
        for (boolean tied : new boolean[] {true, false}) {
            try (MambaModel model = mamba1Lm(V, tied, rng);
                 Trainer trainer = Trainer.builder(model).batch(B).seqLen(T).ignoreIndex(IGNORE).build()) {
                int[][] tk = tokens(rng, B, T, V, IGNORE);
                int[] ids = tk[0], targets = tk[1];
                StepResult r = trainer.stepTokens(ids, targets, BackwardOptions.accumulate());
                assertEquals(8, r.counted());
                Mamba1TrainReference ref = new Mamba1TrainReference(model);
                DoubleSupplier loss = () -> mamba1LmLoss(ref, V, tied, ids, targets, IGNORE, B, T);
                double want = loss.getAsDouble();
                assertEquals(want, r.loss(), 1e-5 * want, "loss");
                assertEquals(trainer.evaluateTokens(ids, targets).loss(), r.loss(), 1e-6 * want, "evaluateTokens");
                List<String> report = new ArrayList<>();
                for (String name : model.parameterNames()) {
                    double err = TestUtil.relL2(trainer.gradient(name), TestUtil.centralDifferences(ref.w.get(name), H, loss));
                    report.add(String.format("%s %.2e", name, err));
                    assertTrue(err < FD_TOL, (tied ? "tied " : "untied ") + name + ": relative error " + err + "\n"
                            + String.join("\n", report));
                }
                assertEquals(tied, !model.parameterNames().contains(HEAD));
                System.out.println("LM gradient check (Mamba-1, " + (tied ? "tied" : "untied") + "), relative L2 error:\n  "
                        + String.join("\n  ", report));
            }
        }
    }

    /**
     * T = 13 crosses the state checkpoints (chunk 8); V = 20000 with 900 rows makes the head's loss run in two
     * blocks of rows (838 + 62), so the head's gradient is summed over blocks.
     */
    @Test
    void mamba3EveryGradientMatchesTheDoubleBackwardTiedAndUntied() {
        Random rng = new Random(SEED + 1);
        record Case(int B, int T, int V, boolean tied) {}
        for (Case k : List.of(new Case(2, 13, 11, true), new Case(2, 13, 11, false), new Case(2, 450, 20000, true))) {
            int B = k.B, T = k.T, V = k.V;
            boolean tied = k.tied;
            try (MambaModel model = Mamba3ReferenceTest.model(mamba3Small(), 0, V, tied, rng);
                 Trainer trainer = Trainer.builder(model).batch(B).seqLen(T).build()) {
                int[][] tk = tokens(rng, B, T, V, Trainer.DEFAULT_IGNORE_INDEX);
                int[] ids = tk[0], targets = tk[1];
                StepResult r = trainer.stepTokens(ids, targets, BackwardOptions.accumulate());
                Mamba3Reference ref = new Mamba3Reference(model);
                double[] logits = ref.forward(null, ids, B, T, ref.zeroState(B));
                double[] dLogits = new double[logits.length];
                double want = crossEntropy(logits, V, targets, Trainer.DEFAULT_IGNORE_INDEX, dLogits);
                assertEquals(want, r.loss(), 1e-5 * want, "loss");
                Mamba3Reference.Gradients g = ref.backward(null, ids, B, T, ref.zeroState(B), dLogits);
                List<String> report = new ArrayList<>();
                for (String name : model.parameterNames()) {
                    double err = TestUtil.relL2(trainer.gradient(name), g.params().get(name));
                    report.add(String.format("%s %.2e", name, err));
                    assertTrue(err < REF_TOL, (tied ? "tied " : "untied ") + name + ": relative error " + err + "\n"
                            + String.join("\n", report));
                }
            }
        }
    }

    /** The training forward's loss equals the cross-entropy of the inference forward's logits. */
    @Test
    void lossMatchesTheInferenceLogits() {
        Random rng = new Random(SEED + 2);
        int B = 3, T = 9, V = 37;
        try (MambaModel model = mamba1Lm(V, false, rng);
             Trainer trainer = Trainer.builder(model).batch(B).seqLen(T).build()) {
            int[][] tk = tokens(rng, B, T, V, Trainer.DEFAULT_IGNORE_INDEX);
            float[] logits = model.forwardTokens(null, tk[0], B, T);
            double[] ld = new double[logits.length];
            for (int i = 0; i < ld.length; i++) ld[i] = logits[i];
            double want = crossEntropy(ld, V, tk[1], Trainer.DEFAULT_IGNORE_INDEX, null);
            StepResult r = trainer.evaluateTokens(tk[0], tk[1]);
            assertEquals(want, r.loss(), 1e-5 * want);
            assertTrue(Double.isNaN(r.gradNorm()));
            for (String n : model.parameterNames()) for (float f : trainer.gradient(n)) assertEquals(0f, f, n);
        }
    }

    /**
     * The split form (forwardTokens → cross-entropy gradient in Java → backwardLogits) equals the fused stepTokens:
     * the logits equal the inference forward's, every gradient agrees to f32 rounding (V = 20000 with 900 rows:
     * two head blocks), and a backward without its forward is refused.
     */
    @Test
    void splitFormMatchesTheFusedStep() {
        Random rng = new Random(SEED + 8);
        int B = 2, T = 450, V = 20000;
        try (MambaModel model = MambaModel.builder(Mamba3Config.builder().dModel(8).headdim(4).dState(6).layers(1).build())
                .vocabSize(V).seed(8).build();
             Trainer trainer = Trainer.builder(model).batch(B).seqLen(T).build()) {
            int[][] tk = tokens(rng, B, T, V, Trainer.DEFAULT_IGNORE_INDEX);
            StepResult fused = trainer.stepTokens(tk[0], tk[1], BackwardOptions.accumulate().scale(0.5));
            List<float[]> g1 = new ArrayList<>();
            for (String n : model.parameterNames()) g1.add(trainer.gradient(n));
            trainer.zeroGrad();
            float[] logits = trainer.forwardTokens(tk[0]);
            double fwd = TestUtil.relL2(logits, model.forwardTokens(null, tk[0], B, T));
            assertTrue(fwd < 1e-5, "training logits vs inference: rel L2 " + fwd);
            double[] ld = new double[logits.length], dl = new double[logits.length];
            for (int i = 0; i < ld.length; i++) ld[i] = logits[i];
            double loss = crossEntropy(ld, V, tk[1], Trainer.DEFAULT_IGNORE_INDEX, dl);
            assertEquals(loss, fused.loss(), 1e-5 * loss);
            float[] dLogits = new float[dl.length];
            for (int i = 0; i < dl.length; i++) dLogits[i] = (float) dl[i];
            StepResult split = trainer.backwardLogits(dLogits, BackwardOptions.accumulate().scale(0.5));
            assertFalse(split.optimizerStepped());
            for (int i = 0; i < g1.size(); i++) {
                String n = model.parameterNames().get(i);
                double err = TestUtil.relL2(trainer.gradient(n), g1.get(i));
                assertTrue(err < 1e-5, n + ": split vs fused gradient rel L2 " + err);
            }
            assertThrows(IllegalStateException.class, () -> trainer.backwardLogits(dLogits));
            assertThrows(IllegalArgumentException.class, () -> trainer.backwardLogits(new float[3]));
        }
    }

    /** next = perm(current): learned to > 99% accuracy by both architectures. */
    @Test
    void tinyLanguageModelsLearnADeterministicNextTokenTask() {
        int V = 16, B = 8, T = 16;
        for (int arch = 1; arch <= 3; arch += 2) {
            Random rng = new Random(SEED + 3);
            ModelConfig c = arch == 1 ? Mamba1Config.builder().dModel(32).dState(8).layers(2).build()
                    : Mamba3Config.builder().dModel(32).headdim(16).dState(8).layers(2).build();
            try (MambaModel model = MambaModel.builder(c).vocabSize(V).seed(3).build();
                 Trainer trainer = Trainer.builder(model).batch(B).seqLen(T).adamW(AdamW.ofLearningRate(1e-2).weightDecay(0))
                         .clipGradNorm(1.0).build()) {
                StepResult last = null;
                for (int step = 0; step < 300; step++) {
                    int[][] tk = permutationTask(rng, B, T, V);
                    last = trainer.stepTokens(tk[0], tk[1]);
                    if (step > 50 && last.accuracy() == 1.0) break;
                }
                int[][] test = permutationTask(new Random(SEED + 99), B, T, V);
                StepResult eval = trainer.evaluateTokens(test[0], test[1]);
                System.out.println("Mamba-" + arch + " LM learning: " + last + "; held-out " + eval);
                assertTrue(eval.accuracy() > 0.99, "Mamba-" + arch + " held-out accuracy " + eval.accuracy());
            }
        }
    }

    static int[][] permutationTask(Random rng, int B, int T, int V) {
        int[] ids = new int[B * T], targets = new int[B * T];
        for (int b = 0; b < B; b++) {
            int tok = rng.nextInt(V);
            for (int t = 0; t < T; t++) {
                ids[b * T + t] = tok;
                tok = (5 * tok + 3) % V;
                targets[b * T + t] = tok;
            }
        }
        return new int[][] {ids, targets};
    }

    private static List<float[]> train(MambaModel model, int threads, int steps, boolean tied) {
        Random rng = new Random(SEED + 4);
        int B = 3, T = 40, V = model.vocabSize();
        try (Trainer t = Trainer.builder(model).batch(B).seqLen(T).threads(threads)
                .adamW(AdamW.ofLearningRate(3e-3).weightDecay(0.1)).clipGradNorm(0.5).build()) {
            for (int s = 0; s < steps; s++) {
                int[][] tk = tokens(rng, B, T, V, Trainer.DEFAULT_IGNORE_INDEX);
                t.stepTokens(tk[0], tk[1], s % 2 == 0 ? BackwardOptions.accumulate().scale(0.5) : BackwardOptions.step().scale(0.5));
            }
        }
        List<float[]> w = new ArrayList<>();
        for (String n : model.parameterNames()) w.add(model.getParameter(n));
        return w;
    }

    @Test
    void bitIdenticalOverThreadCounts() {
        int saved = org.mamba4j.nativ.global.libmamba.cpuThreads();
        try {
            for (boolean tied : new boolean[] {true, false}) {
                List<float[]> ref = null;
                for (int threads : new int[] {1, 2, 3}) {
                    try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(48).dState(8).layers(2).build())
                            .vocabSize(300).tieEmbeddings(tied).seed(9).build()) {
                        List<float[]> w = train(m, threads, 4, tied);
                        if (ref == null) ref = w;
                        else for (int i = 0; i < w.size(); i++) assertArrayEquals(ref.get(i), w.get(i), "threads " + threads);
                    }
                }
            }
        } finally {
            org.mamba4j.nativ.global.libmamba.setCpuThreads(saved);
        }
    }

    @Test
    void exactResumeFromWeightsAndOptimizerState() {
        Random rng = new Random(SEED + 5);
        int B = 2, T = 12, V = 23;
        List<int[][]> data = new ArrayList<>();
        for (int i = 0; i < 6; i++) data.add(tokens(rng, B, T, V, Trainer.DEFAULT_IGNORE_INDEX));
        ModelConfig c = Mamba3Config.builder().dModel(16).headdim(8).dState(8).layers(2).build();
        AdamW opt = AdamW.ofLearningRate(5e-3).weightDecay(0.05);
        try (MambaModel straight = MambaModel.builder(c).vocabSize(V).tieEmbeddings(false).seed(4).build();
             MambaModel resumed = MambaModel.builder(c).vocabSize(V).tieEmbeddings(false).seed(77).build()) {
            OptimizerState saved;
            try (Trainer t = Trainer.builder(straight).batch(B).seqLen(T).adamW(opt).build()) {
                for (int i = 0; i < 3; i++) t.stepTokens(data.get(i)[0], data.get(i)[1]);
                saved = t.exportOptimizerState();
                t.snapshot(resumed);
                for (int i = 3; i < 6; i++) t.stepTokens(data.get(i)[0], data.get(i)[1]);
            }
            try (Trainer t = Trainer.builder(resumed).batch(B).seqLen(T).adamW(opt).build()) {
                t.importOptimizerState(saved);
                assertEquals(3, t.stepCount());
                for (int i = 3; i < 6; i++) t.stepTokens(data.get(i)[0], data.get(i)[1]);
            }
            for (String n : straight.parameterNames())
                assertArrayEquals(straight.getParameter(n), resumed.getParameter(n), n);
        }
    }

    @Test
    void ignoredTargetsDoNotCount() {
        Random rng = new Random(SEED + 6);
        int B = 2, T = 6, V = 9;
        try (MambaModel model = mamba1Lm(V, true, rng);
             Trainer trainer = Trainer.builder(model).batch(B).seqLen(T).build()) {
            int[][] tk = tokens(rng, B, T, V, Trainer.DEFAULT_IGNORE_INDEX);
            int[] ids = tk[0], targets = tk[1].clone();
            // Ignoring a position changes the loss to the mean over the others (checked against the reference).
            for (int t = 0; t < T; t++) targets[t] = Trainer.DEFAULT_IGNORE_INDEX;  // the whole first row
            StepResult r = trainer.stepTokens(ids, targets, BackwardOptions.accumulate());
            long counted = java.util.Arrays.stream(targets).filter(t -> t != Trainer.DEFAULT_IGNORE_INDEX).count();
            assertEquals(counted, r.counted());
            Mamba1TrainReference ref = new Mamba1TrainReference(model);
            double want = mamba1LmLoss(ref, V, true, ids, targets, Trainer.DEFAULT_IGNORE_INDEX, B, T);
            assertEquals(want, r.loss(), 1e-5 * want);
            trainer.zeroGrad();
            // Everything ignored: loss 0, nothing counted, a zero gradient; the step is taken with a zero gradient.
            int[] none = new int[B * T];
            java.util.Arrays.fill(none, Trainer.DEFAULT_IGNORE_INDEX);
            StepResult z = trainer.stepTokens(ids, none);
            assertEquals(0, z.counted());
            assertEquals(0.0, z.loss());
            assertEquals(0.0, z.gradNorm());
            assertFalse(z.skipped());
        }
    }

    @Test
    void argumentsAndCallsAreChecked() {
        Random rng = new Random(SEED + 7);
        int B = 2, T = 3, V = 5;
        try (MambaModel model = mamba1Lm(V, true, rng);
             Trainer trainer = Trainer.builder(model).batch(B).seqLen(T).build()) {
            int[] ids = {0, 1, 2, 3, 4, 0}, targets = {1, 2, 3, 4, 0, -100};
            trainer.stepTokens(ids, targets);  // valid
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> trainer.stepTokens(new int[] {0, 1, 5, 3, 4, 0}, targets));
            assertTrue(e.getMessage().contains("token id 5 at position 2"), e.getMessage());
            assertThrows(IllegalArgumentException.class, () -> trainer.stepTokens(new int[] {0, -1, 2, 3, 4, 0}, targets));
            e = assertThrows(IllegalArgumentException.class, () -> trainer.stepTokens(ids, new int[] {1, 2, 3, 4, 5, 0}));
            assertTrue(e.getMessage().contains("targets[4] = 5"), e.getMessage());
            assertThrows(IllegalArgumentException.class, () -> trainer.stepTokens(ids, new int[] {1, 2, 3, 4, -1, 0}));
            assertThrows(IllegalArgumentException.class, () -> trainer.stepTokens(new int[5], targets));
            assertThrows(IllegalArgumentException.class, () -> trainer.evaluateTokens(ids, new int[7]));
            // Float-input calls on a language model.
            float[] x = new float[B * T * model.inputWidth()];
            assertThrows(IllegalStateException.class, () -> trainer.forward(x));
            assertThrows(IllegalStateException.class, () -> trainer.step(x, x));
            assertThrows(IllegalStateException.class, () -> trainer.stepMse(x, x));
            assertThrows(IllegalStateException.class, () -> trainer.burnIn(x, T));
            assertThrows(IllegalStateException.class, trainer::inputGradient);
            assertThrows(IllegalStateException.class, () -> Trainer.builder(model).crossEntropyHead(V).build());
            // A weight check: the failed calls changed nothing, training goes on.
            assertEquals(1, trainer.stepCount());
            assertTrue(trainer.stepTokens(ids, targets).optimizerStepped());
        }
        try (MambaModel floats = MambaModel.builder(Mamba1Config.builder().dModel(8).layers(1).build()).inputDim(2).build();
             Trainer trainer = Trainer.builder(floats).batch(1).seqLen(2).build()) {
            assertThrows(IllegalStateException.class, () -> trainer.stepTokens(new int[2], new int[2]));
        }
    }

    @Test
    void noWeightDecayOnTheEmbeddingByDefault() {
        try (MambaModel tied = MambaModel.builder(Mamba1Config.builder().dModel(8).layers(1).build()).vocabSize(10).build();
             MambaModel untied = MambaModel.builder(Mamba1Config.builder().dModel(8).layers(1).build()).vocabSize(10)
                     .tieEmbeddings(false).build();
             Trainer a = Trainer.builder(tied).build();
             Trainer b = Trainer.builder(untied).build()) {
            assertFalse(a.weightDecay(EMB));
            assertFalse(b.weightDecay(EMB));
            assertTrue(b.weightDecay(HEAD));
            assertTrue(b.weightDecay("backbone.layers.0.mixer.in_proj.weight"));
        }
    }
}
