package org.mamba4j.bench;

import java.util.Random;
import java.util.concurrent.TimeUnit;
import org.mamba4j.BackwardOptions;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.StepResult;
import org.mamba4j.Trainer;
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
import org.openjdk.jmh.infra.BenchmarkParams;

/**
 * CPU training step time of Mamba-1: forward + backward through time (+ AdamW) over a [B, T] batch.
 * Models: "128x3" = d_model 128, 3 layers (the reference crate's default: d_state 16, expand 2, 0.23M weights
 * with a 32-wide input projection) and "256x4" = d_model 256, 4 layers. Tokens/s = B·T / step time: the
 * {@code tokens*} benchmarks report it directly (throughput with B·T operations per call).
 *
 * <pre>
 * java -jar benchmarks.jar TrainStepBench                       # all
 * java -jar benchmarks.jar TrainStepBench -p model=128x3 -p seqLen=32
 * </pre>
 *
 * For comparison: the reference Rust crate (mamba-rs) reports 14.9 ms per fwd+bwd step for its default
 * config at T = 32 on a 48-thread Xeon. Log the OpenBLAS core ({@code blasCoreName}) with the numbers.
 */
@State(Scope.Benchmark)
@Warmup(iterations = 3, time = 2)
@Measurement(iterations = 5, time = 2)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED"})
public class TrainStepBench {
    @Param({"128x3", "256x4"})
    public String model;
    @Param({"16"})
    public int batch;
    @Param({"64"})
    public int seqLen;
    /** 0 = all hardware threads. */
    @Param({"0"})
    public int threads;

    private MambaModel mamba;
    private Trainer trainer;
    private float[] inputs, dOutput;

    @Setup(Level.Trial)
    public void setUp(BenchmarkParams params) {
        String[] wl = model.split("x");
        int dModel = Integer.parseInt(wl[0]), layers = Integer.parseInt(wl[1]), inputDim = 32;
        mamba = MambaModel.builder(Mamba1Config.builder().dModel(dModel).layers(layers).build()).inputDim(inputDim).seed(1).build();
        trainer = Trainer.builder(mamba).batch(batch).seqLen(seqLen)
                .threads(threads > 0 ? threads : Runtime.getRuntime().availableProcessors()).build();
        Random rng = new Random(1);
        inputs = new float[batch * seqLen * inputDim];
        dOutput = new float[batch * seqLen * dModel];
        for (int i = 0; i < inputs.length; i++) inputs[i] = (float) rng.nextGaussian();
        // a small output gradient keeps the weights in their working range over thousands of AdamW steps
        for (int i = 0; i < dOutput.length; i++) dOutput[i] = (float) (1e-3 * rng.nextGaussian());
        trainer.setLearningRate(1e-5);
        System.out.println("# OpenBLAS core: " + org.mamba4j.nativ.global.libmamba.blasCoreName().getString()
                + ", threads: " + org.mamba4j.nativ.global.libmamba.cpuThreads());
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        trainer.close();
        mamba.close();
    }

    /** Forward + backward + global-norm + AdamW: one full training step, ms. */
    @Benchmark
    @BenchmarkMode(Mode.AverageTime)
    @OutputTimeUnit(TimeUnit.MILLISECONDS)
    public StepResult step() {
        return trainer.step(inputs, dOutput);
    }

    /** Forward + backward only (gradients accumulate), ms — comparable to a "fwd+bwd step". */
    @Benchmark
    @BenchmarkMode(Mode.AverageTime)
    @OutputTimeUnit(TimeUnit.MILLISECONDS)
    public StepResult forwardBackward() {
        return trainer.step(inputs, dOutput, BackwardOptions.accumulate());
    }

    /** Tokens (B·T positions) per second of full training steps. Assumes B·T = 16·64; for other shapes divide step(). */
    @Benchmark
    @BenchmarkMode(Mode.Throughput)
    @OutputTimeUnit(TimeUnit.SECONDS)
    @org.openjdk.jmh.annotations.OperationsPerInvocation(16 * 64)
    public StepResult tokensPerSecond() {
        return trainer.step(inputs, dOutput);
    }
}
