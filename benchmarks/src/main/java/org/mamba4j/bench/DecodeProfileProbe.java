package org.mamba4j.bench;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.util.Random;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.GemmMode;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.MambaState;

/**
 * A fixed decode (or prefill) workload for a kernel profiler (scripts/device-profile.sh runs it under ncu): a random
 * Mamba-1 backbone of the given shape on CUDA device 0, graphs off, 2 warm-up calls and then `steps` steps of batch B
 * — or, with PREFILL_T &gt; 0, `steps` prefills of PREFILL_T tokens per row. The profiler attributes each kernel's
 * time; this program only makes the launches repeatable.
 *
 * <pre>java ... DecodeProfileProbe D_MODEL LAYERS DTYPE BATCH MODE [STEPS [PREFILL_T]]</pre>
 */
public final class DecodeProfileProbe {
    private DecodeProfileProbe() {}

    public static void main(String[] args) {
        int dModel = Integer.parseInt(args[0]), layers = Integer.parseInt(args[1]);
        DType dtype = DType.valueOf(args[2]);
        int batch = Integer.parseInt(args[3]);
        GemmMode mode = GemmMode.valueOf(args[4]);
        int steps = args.length > 5 ? Integer.parseInt(args[5]) : 3;
        int prefillT = args.length > 6 ? Integer.parseInt(args[6]) : 0;
        Mamba1Config config = Mamba1Config.builder().dModel(dModel).layers(layers).dState(16).dConv(4).expand(2).build();
        try (MambaModel m = MambaModel.builder(config).device(Device.cuda(0)).dtype(dtype).gemmMode(mode).seed(7).build();
                MambaState s = m.newState(batch)) {
            m.setCudaGraphs(false);
            Random rng = new Random(1);
            int T = Math.max(1, prefillT);
            FloatBuffer x = ByteBuffer.allocateDirect(4 * batch * T * dModel).order(ByteOrder.nativeOrder()).asFloatBuffer();
            FloatBuffer y = ByteBuffer.allocateDirect(4 * batch * dModel).order(ByteOrder.nativeOrder()).asFloatBuffer();
            for (int i = 0; i < batch * T * dModel; i++) x.put(i, rng.nextFloat() * 2 - 1);
            for (int i = 0; i < 2 + steps; i++) {
                if (prefillT > 0) m.prefill(s, x, prefillT, y);
                else m.step(s, x, y);
            }
            System.out.printf("profiled %d %s: d_model %d, %d layers, %s, B = %d, %s; y[0] = %g%n", steps,
                    prefillT > 0 ? "prefills of " + prefillT + " tokens" : "steps", dModel, layers, dtype, batch, mode, y.get(0));
        }
    }
}
