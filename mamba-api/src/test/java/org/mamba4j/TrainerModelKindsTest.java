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

    /** Its embedding would get no gradient while weight decay shrinks it: refused up front. */
    @Test
    void languageModelsAreRejected() {
        try (MambaModel lm = MambaModel.builder(CONFIG).vocabSize(12).build()) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Trainer.builder(lm));
            assertTrue(e.getMessage().contains("training language models is not supported yet"), e.getMessage());
        }
    }

    /**
     * A snapshot copies every field of the model — a language model's vocabulary and tying included, which the
     * old snapshot dropped. Trainers refuse language models now, so the snapshot's copy is checked directly.
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
