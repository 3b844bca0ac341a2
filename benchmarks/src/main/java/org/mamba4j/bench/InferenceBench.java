package org.mamba4j.bench;

import java.util.Random;
import java.util.concurrent.TimeUnit;
import org.mamba4j.DType;
import org.mamba4j.GemmMode;
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
 * CPU decode latency (one step, B = 1) and prefill throughput. Shapes: "default" = d_model 128, 3 layers
 * (the reference crate's default); "130m" = d_model 768, 24 layers (mamba-130m's backbone). Weight storage: F32,
 * or BF16 (2-byte matrices, f32 compute: a decode step reads half the bytes).
 * Run: {@code java -jar benchmarks/target/benchmarks.jar InferenceBench}; F32 vs BF16 decode at 130m:
 * {@code java -jar benchmarks/target/benchmarks.jar "InferenceBench.step$" -p shape=130m -p gemmMode=CUBLAS_FAST}
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 2)
@Measurement(iterations = 5, time = 2)
@Fork(value = 1, jvmArgsAppend = "--enable-native-access=ALL-UNNAMED")
public class InferenceBench {
    @Param({"default", "130m"})
    public String shape;

    /** GemmMode: the default (CUBLAS_FAST: OpenBLAS here) or DETERMINISTIC (our batch-invariant kernel). */
    @Param({"CUBLAS_FAST", "DETERMINISTIC"})
    public String gemmMode;

    /** Weight storage: F32 or BF16. */
    @Param({"F32", "BF16"})
    public String dtype;

    private MambaModel model;
    private MambaState state;
    private float[] x, y, prompt;
    private static final int PREFILL_T = 1024;

    @Setup(Level.Trial)
    public void setUp() {
        Mamba1Config c = shape.equals("130m") ? Mamba1Config.builder().dModel(768).layers(24).build() : Mamba1Config.defaults();
        model = MambaModel.builder(c).gemmMode(GemmMode.valueOf(gemmMode)).dtype(DType.valueOf(dtype)).seed(1).build();
        state = model.newState(1);
        Random rng = new Random(2);
        x = new float[c.dModel()];
        for (int i = 0; i < x.length; i++) x[i] = (float) rng.nextGaussian();
        y = new float[c.dModel()];
        prompt = new float[PREFILL_T * c.dModel()];
        for (int i = 0; i < prompt.length; i++) prompt[i] = (float) rng.nextGaussian();
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        state.close();
        model.close();
    }

    /** One decode step at B = 1 (float[] in and out). */
    @Benchmark
    public float[] step() {
        model.step(state, x, y);
        return y;
    }

    /** A 1024-token prefill at B = 1; tokens/s = 1024 / time. */
    @Benchmark
    @OutputTimeUnit(TimeUnit.MILLISECONDS)
    @Measurement(iterations = 3, time = 3)
    public float[] prefill1024() {
        state.reset();
        return model.prefill(state, prompt, PREFILL_T);
    }
}
