package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Random;
import org.junit.jupiter.api.Test;

/** Training actually learns: a small task whose loss must fall below a stated threshold within a step budget. */
class TrainerLearningTest {
    /**
     * "Recall the token seen 2 steps ago" over a vocabulary of 4 (one-hot inputs): the answer depends on the
     * recurrence (conv history / SSM state), not on the current input. A 1-layer d_model 16 model with a
     * cross-entropy head must reach, on fresh data, loss < 0.1 and accuracy > 97% within 200 steps of
     * B = 8, T = 24 (the first 2 positions of each sequence are ignored).
     */
    @Test
    void lagTwoRecallIsLearnedWithin200Steps() {
        int V = 4, B = 8, T = 24, LAG = 2, steps = 200;
        Random rng = new Random(42);
        try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(16).dState(8).layers(1).build())
                .inputDim(V).seed(3).build();
             Trainer t = Trainer.builder(m).batch(B).seqLen(T).crossEntropyHead(V)
                     .adamW(AdamW.ofLearningRate(1e-2).weightDecay(0.0)).clipGradNorm(1.0).build()) {
            float[] x = new float[B * T * V];
            int[] y = new int[B * T];
            StepResult r = null;
            for (int s = 0; s < steps; s++) {
                lagRecallBatch(rng, x, y, B, T, V, LAG);
                r = t.stepCrossEntropy(x, y);
            }
            lagRecallBatch(new Random(7), x, y, B, T, V, LAG);
            StepResult eval = t.evaluateCrossEntropy(x, y);
            System.out.println("lag-2 recall after " + steps + " steps: " + eval);
            assertTrue(eval.loss() < 0.1 && eval.accuracy() > 0.97, "after " + steps + " steps: last " + r + ", eval " + eval);
        }
    }

    /** One-hot tokens x [B, T, V]; targets y = the token `lag` steps back (ignored before that). */
    static void lagRecallBatch(Random rng, float[] x, int[] y, int B, int T, int V, int lag) {
        java.util.Arrays.fill(x, 0f);
        for (int b = 0; b < B; b++) {
            int[] tok = new int[T];
            for (int t = 0; t < T; t++) {
                tok[t] = rng.nextInt(V);
                x[(b * T + t) * V + tok[t]] = 1f;
                y[b * T + t] = t < lag ? Trainer.DEFAULT_IGNORE_INDEX : tok[t - lag];
            }
        }
    }
}
