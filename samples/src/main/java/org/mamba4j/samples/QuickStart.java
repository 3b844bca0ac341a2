package org.mamba4j.samples;

import java.util.Arrays;
import org.mamba4j.Device;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.MambaState;

/** The README's quick start: build a small Mamba-1, prefill a prompt for 4 sequences, then decode. */
public final class QuickStart {
    private QuickStart() {}

    public static void main(String[] args) {
        // README-QUICKSTART-BEGIN
        Mamba1Config config = Mamba1Config.builder().dModel(128).layers(3).build();
        try (MambaModel model = MambaModel.builder(config).inputDim(32).device(Device.cpu()).seed(42).build();
             MambaState state = model.newState(4)) {                  // 4 independent sequences
            float[] prompt = new float[4 * 16 * 32];                     // [batch, steps, inputDim]
            Arrays.fill(prompt, 0.1f);
            float[] last = model.prefill(state, prompt, 16);             // carries the state, returns [4, 128]
            float[] y = model.step(state, new float[4 * 32]);            // one more step: [4 * 128]
            System.out.printf("prefill -> %d floats, step -> %d floats, y[0] = %.5f%n", last.length, y.length, y[0]);
        }
        // README-QUICKSTART-END
    }
}
