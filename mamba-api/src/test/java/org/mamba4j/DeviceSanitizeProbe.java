package org.mamba4j;

/**
 * The smallest GPU workload for compute-sanitizer (scripts/device-sanitize.sh): on CUDA device 0, a model, one
 * prefill and one decode step (eager and from a captured graph), and one training step with the optimizer.
 * Small shapes on purpose: racecheck and initcheck slow kernels down by orders of magnitude.
 */
public final class DeviceSanitizeProbe {
    private DeviceSanitizeProbe() {}

    public static void main(String[] args) {
        Device gpu = Device.cuda(0);
        try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(64).dState(16).layers(2).build()).inputDim(8)
                .device(gpu).seed(1).build();
             MambaState s = m.newState(2);
             Trainer t = Trainer.builder(m).batch(2).seqLen(8).clipGradNorm(1).build()) {
            java.util.Random rng = new java.util.Random(1);
            float[] prompt = TestUtil.random(rng, 2 * 8 * 8, 1);
            m.prefill(s, prompt, 8);
            m.setCudaGraphs(false);
            // random step inputs: with x = 0 the gate z is 0 and every output is exactly 0 (a zero run proves little)
            float[] eager = m.step(s, TestUtil.random(rng, 2 * 8, 1));
            m.setCudaGraphs(true);
            m.step(s, TestUtil.random(rng, 2 * 8, 1));  // captures
            m.step(s, TestUtil.random(rng, 2 * 8, 1));  // replays
            StepResult r = t.stepMse(prompt, TestUtil.random(rng, 2 * 8 * 64, 1));
            System.out.println("probe: decode y[0] = " + eager[0] + ", training " + r);
        }
    }
}
