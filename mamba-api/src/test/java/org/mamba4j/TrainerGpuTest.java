package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Random;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Training on a host with a GPU: until the CUDA backend implements the backward stages, Trainer.supports
 * says no and building a trainer over a CUDA model fails with a clear message — while CPU training on the
 * same host works (the fallback the samples use). Once CUDA training exists, its gradients must match the CPU's.
 */
@Tag("gpu")
class TrainerGpuTest {
    @BeforeAll
    static void needsGpu() {
        Assumptions.assumeTrue(Device.cudaCount() > 0, () -> "no CUDA device: " + Device.cudaUnavailableReason());
    }

    @Test
    void unsupportedDeviceFailsClearlyAndCpuTrainingStillWorks() {
        Mamba1Config c = Mamba1Config.builder().dModel(32).layers(2).build();
        Random rng = new Random(3);
        float[] x = TestUtil.random(rng, 2 * 8 * 4, 1), dy = TestUtil.random(rng, 2 * 8 * 32, 1);
        try (MambaModel cpu = MambaModel.builder(c).inputDim(4).seed(5).build();
             MambaModel gpu = MambaModel.builder(c).inputDim(4).seed(5).device(Device.cuda(0)).build();
             Trainer t = Trainer.builder(cpu).batch(2).seqLen(8).build()) {
            t.step(x, dy, BackwardOptions.accumulate());
            float[] g = t.gradient("backbone.layers.0.mixer.in_proj.weight");
            if (!Trainer.supports(Device.cuda(0))) {
                MambaException e = assertThrows(MambaException.class, () -> Trainer.builder(gpu).batch(2).seqLen(8).build());
                assertTrue(e.getMessage().contains("training is not supported on this backend yet"), e.getMessage());
                return;
            }
            try (Trainer tg = Trainer.builder(gpu).batch(2).seqLen(8).build()) {
                tg.step(x, dy, BackwardOptions.accumulate());
                for (String n : cpu.parameterNames()) {
                    double err = TestUtil.relL2(tg.gradient(n), t.gradient(n));
                    assertTrue(err < 1e-4, n + ": GPU vs CPU gradient " + err);
                }
                assertEquals(g.length, tg.gradient("backbone.layers.0.mixer.in_proj.weight").length);
            }
        }
    }
}
