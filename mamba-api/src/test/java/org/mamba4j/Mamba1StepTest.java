package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Random;
import org.junit.jupiter.api.Test;

/** The native f32 Mamba-1 against the independent double reference, and the identities between calls. */
class Mamba1StepTest {
    private static final long SEED = System.nanoTime();

    private static MambaModel smallModel(int inputDim, Random rng) {
        Mamba1Config c = Mamba1Config.builder().dModel(32).layers(2).dState(8).build();
        MambaModel m = MambaModel.builder(c).inputDim(inputDim).seed(rng.nextLong()).build();
        TestUtil.randomizeWeights(m, rng);
        return m;
    }

    @Test
    void stepMatchesDoubleReferenceOver40Steps() {
        Random rng = new Random(SEED);
        for (int inputDim : new int[] {0, 7}) {
            int batch = 3;
            try (MambaModel m = smallModel(inputDim, rng); MambaState s = m.newState(batch)) {
                Mamba1Reference ref = new Mamba1Reference(m, batch);
                double worst = 0;
                for (int t = 0; t < 40; t++) {
                    float[] x = TestUtil.random(rng, batch * m.inputWidth(), 1.0);
                    float[] y = m.step(s, x);
                    double[] want = ref.step(x);
                    worst = Math.max(worst, TestUtil.relL2(y, want));
                }
                assertTrue(worst < 1e-5, "seed " + SEED + " inputDim " + inputDim + ": worst rel L2 " + worst);
            }
        }
    }

    @Test
    void defaultConfigMatchesReference() {
        Random rng = new Random(SEED + 1);
        try (MambaModel m = MambaModel.builder(Mamba1Config.defaults()).inputDim(16).seed(3).build();
             MambaState s = m.newState(2)) {
            TestUtil.randomizeWeights(m, rng);
            Mamba1Reference ref = new Mamba1Reference(m, 2);
            double worst = 0;
            for (int t = 0; t < 32; t++) {
                float[] x = TestUtil.random(rng, 2 * 16, 1.0);
                worst = Math.max(worst, TestUtil.relL2(m.step(s, x), ref.step(x)));
            }
            assertTrue(worst < 1e-5, "seed " + SEED + ": worst rel L2 " + worst);
        }
    }
}
