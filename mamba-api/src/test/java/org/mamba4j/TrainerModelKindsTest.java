package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** Which models a Trainer takes, and what a snapshot of one keeps. */
class TrainerModelKindsTest {
    private static final Mamba1Config CONFIG = Mamba1Config.builder().dModel(16).dState(4).layers(2).build();

    /** Language models train on token ids (LanguageModelTrainingTest); their float-input calls are refused. */
    @Test
    void languageModelsTrainOnTokens() {
        try (MambaModel lm = MambaModel.builder(CONFIG).vocabSize(12).build();
             Trainer t = Trainer.builder(lm).batch(1).seqLen(2).build()) {
            assertTrue(t.stepTokens(new int[] {3, 4}, new int[] {4, 5}).optimizerStepped());
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> t.forward(new float[32]));
            assertTrue(e.getMessage().contains("stepTokens"), e.getMessage());
        }
    }

    /**
     * A snapshot copies every field of the model — a language model's vocabulary and tying included, which the
     * old snapshot dropped: directly, and through a trainer of the language model.
     */
    @Test
    void snapshotKeepsEveryModelField() {
        for (boolean tie : new boolean[] {true, false}) {
            try (MambaModel lm = MambaModel.builder(CONFIG).vocabSize(12).tieEmbeddings(tie).seed(9).build();
                 MambaModel copy = Trainer.copyOf(lm)) {
                assertNotSame(lm, copy);
                assertEquals(12, copy.vocabSize());
                assertEquals(tie, copy.tieEmbeddings());
                assertEquals(lm.config(), copy.config());
                assertEquals(lm.inputDim(), copy.inputDim());
                assertEquals(lm.device(), copy.device());
                assertEquals(lm.dtype(), copy.dtype());
                assertEquals(lm.parameterNames(), copy.parameterNames());
                for (String name : lm.parameterNames()) assertArrayEquals(lm.getParameter(name), copy.getParameter(name), name);
                int[] ids = {1, 5, 11, 0};
                assertArrayEquals(lm.forwardTokens(null, ids, 1, 4), copy.forwardTokens(null, ids, 1, 4));
                try (Trainer t = Trainer.builder(lm).batch(1).seqLen(4).build()) {
                    t.stepTokens(ids, new int[] {5, 11, 0, 2});
                    try (MambaModel snap = t.snapshot()) {
                        assertEquals(tie, snap.tieEmbeddings());
                        for (String name : lm.parameterNames())
                            assertArrayEquals(lm.getParameter(name), snap.getParameter(name), name);
                    }
                }
            }
        }
        try (MambaModel m = MambaModel.builder(CONFIG).inputDim(3).seed(2).build();
             Trainer t = Trainer.builder(m).batch(1).seqLen(2).build();
             MambaModel snap = t.snapshot()) {
            assertEquals(3, snap.inputDim());
            assertEquals(0, snap.vocabSize());
            try (MambaModel lm = MambaModel.builder(CONFIG).vocabSize(12).build()) {
                assertThrows(IllegalArgumentException.class, () -> t.snapshot(lm), "another shape");
            }
        }
    }
}
