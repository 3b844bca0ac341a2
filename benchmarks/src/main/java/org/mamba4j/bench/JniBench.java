package org.mamba4j.bench;

import java.util.concurrent.TimeUnit;
import org.bytedeco.javacpp.Loader;
import org.mamba4j.nativ.global.libmamba;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Warmup;

/** The fixed cost of crossing into libmamba: an empty native function through the JavaCPP peer. */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = "--enable-native-access=ALL-UNNAMED")
public class JniBench {
    @Setup
    public void load() {
        Loader.load(libmamba.class);
    }

    @Benchmark
    public void emptyNativeCall() {
        libmamba.noop();
    }
}
