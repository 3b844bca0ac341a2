package org.mamba4j.bench;

import java.util.concurrent.TimeUnit;
import org.mamba4j.Device;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.MambaState;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

/**
 * The cost of handing a batch's logits to Java: {@code stepTokens} of a 16-wide one-layer language model with
 * mamba's vocabulary (50,280) on the CPU, so the step is mostly the LM head and the copy of B × 50,280 floats into
 * the caller's array (through the model's reused native buffers from 65,536 floats on; docs/benchmarks.md).
 * Run: {@code java -jar benchmarks/target/benchmarks.jar LogitsBench}
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = "--enable-native-access=ALL-UNNAMED")
public class LogitsBench {
    private static final int VOCAB = 50_280;

    @Param({"1", "64", "256"})
    public int batch;

    private MambaModel model;
    private MambaState state;
    private int[] ids;
    private float[] logits;

    @Setup(Level.Trial)
    public void setUp() {
        Mamba1Config c = Mamba1Config.builder().dModel(16).layers(1).build();
        model = MambaModel.builder(c).vocabSize(VOCAB).device(Device.cpu()).seed(1).build();
        state = model.newState(batch);
        ids = new int[batch];
        for (int i = 0; i < batch; i++) ids[i] = (i * 7919) % VOCAB;
        logits = new float[batch * VOCAB];
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        state.close();
        model.close();
    }

    /** One decode step, logits [B · 50,280] written into a Java array. */
    @Benchmark
    public float[] stepTokens() {
        model.stepTokens(state, ids, logits);
        return logits;
    }
}
