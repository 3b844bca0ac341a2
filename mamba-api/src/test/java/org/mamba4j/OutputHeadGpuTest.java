package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * On a CUDA device (F32): the MSE output head's gradients (every tensor, the head's and the input's) against the CPU
 * backend (cosine ≥ 0.9999, rel L2 < 1e-4, loss rel 1e-5), and the 2^16 loss scaler giving the unscaled steps' bits
 * (weights, losses, gradient norms over 4 AdamW steps) as on the CPU. Skipped where no CUDA device is usable.
 */
@Tag("gpu")
class OutputHeadGpuTest {
    @BeforeAll
    static void needsGpu() {
        Assumptions.assumeTrue(Device.cudaCount() > 0, () -> "no CUDA device: " + Device.cudaUnavailableReason());
    }

    private static final Mamba1Config C = Mamba1Config.builder().dModel(16).dState(8).expand(2).layers(2).build();

    private static MambaModel model(Device device) {
        return MambaModel.builder(C).inputDim(3).seed(21).device(device).build();
    }

    @Test
    void outputHeadGradientsMatchTheCpu() {
        int B = 2, T = 40, W = 3;
        Random rng = new Random(5);
        float[] x = TestUtil.random(rng, B * T * 3, 1), y = TestUtil.random(rng, B * T * W, 1);
        List<List<float[]>> runs = new ArrayList<>();
        double[] losses = new double[2];
        int k = 0;
        for (Device d : new Device[] {Device.cpu(), Device.cuda(0)}) {
            try (MambaModel m = model(d); Trainer t = Trainer.builder(m).batch(B).seqLen(T).outputHead(W).headSeed(8).build()) {
                losses[k++] = t.stepMse(x, y, BackwardOptions.accumulate()).loss();
                List<float[]> g = new ArrayList<>();
                for (String n : t.parameterNames()) g.add(t.gradient(n));
                g.add(t.inputGradient());
                runs.add(g);
            }
        }
        assertEquals(losses[0], losses[1], 1e-5 * losses[0], "MSE through the head, CPU vs CUDA");
        for (int i = 0; i < runs.get(0).size(); i++) {
            double cos = TrainerGpuTest.cosine(runs.get(1).get(i), runs.get(0).get(i));
            double rel = TestUtil.relL2(runs.get(1).get(i), runs.get(0).get(i));
            assertTrue(cos >= 0.9999 && rel < 1e-4, "tensor " + i + ": cosine " + cos + ", rel L2 " + rel);
        }
    }

    @Test
    void aScaledCudaStepGivesTheBitsOfTheUnscaledOne() {
        int B = 2, T = 16;
        try (MambaModel a = model(Device.cuda(0)); MambaModel b = model(Device.cuda(0));
             Trainer plain = Trainer.builder(a).batch(B).seqLen(T).clipGradNorm(0.5).build();
             Trainer scaled = Trainer.builder(b).batch(B).seqLen(T).clipGradNorm(0.5).lossScaler(LossScaler.dynamic()).build()) {
            Random rng = new Random(6);
            for (int s = 0; s < 4; s++) {
                float[] x = TestUtil.random(rng, B * T * 3, 1), y = TestUtil.random(rng, B * T * 16, 1);
                StepResult p = plain.stepMse(x, y), q = scaled.stepMse(x, y);
                assertEquals(65536.0, q.lossScale());
                assertEquals(p.loss(), q.loss(), 0.0, "step " + s);
                assertEquals(p.gradNorm(), q.gradNorm(), 0.0, "step " + s);
                for (String n : a.parameterNames())
                    assertArrayEquals(a.getParameter(n), b.getParameter(n), "step " + s + ": " + n);
            }
        }
    }
}
