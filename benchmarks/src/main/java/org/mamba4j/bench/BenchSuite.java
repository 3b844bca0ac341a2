package org.mamba4j.bench;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.results.format.ResultFormatType;
import org.openjdk.jmh.runner.Runner;
import org.openjdk.jmh.runner.RunnerException;
import org.openjdk.jmh.runner.options.ChainedOptionsBuilder;
import org.openjdk.jmh.runner.options.OptionsBuilder;
import org.openjdk.jmh.runner.options.TimeValue;

/**
 * The JMH suites the regression check runs, writing JMH JSON.
 * <ul>
 *   <li>{@code quick} (CI, ≈ 30 s on 2 cores): the empty JNI call, the default-shape decode step and 1024-token
 *       prefill, and one 128×3 training step; 1 fork, 3 × 0.5 s warm-up, 5 × 0.5 s measurement each.</li>
 *   <li>{@code full}: every CPU JMH benchmark with the iterations its annotations set (several minutes).</li>
 * </ul>
 * Forked JVMs get {@code --enable-native-access=ALL-UNNAMED} and every {@code org.bytedeco.*} system property of this
 * JVM (e.g. the JavaCPP cache folder).
 */
public final class BenchSuite {
    private BenchSuite() {}

    /** {@code BenchSuite quick|full FILE}: runs a suite and writes its JMH JSON to FILE (e.g. to record a baseline). */
    public static void main(String[] args) throws RunnerException {
        if (args.length != 2) {
            System.err.println("usage: BenchSuite quick|full FILE");
            System.exit(2);
        }
        run(args[0], Path.of(args[1]));
    }

    public static void run(String suite, Path json) throws RunnerException {
        ChainedOptionsBuilder o = options(json);
        switch (suite) {
            case "quick" -> o.include("JniBench\\.emptyNativeCall$").include("InferenceBench\\.(step|prefill1024)$")
                    .include("TrainStepBench\\.step$").param("shape", "default").param("gemmMode", "CUBLAS_FAST").param("dtype", "F32").param("model", "128x3")
                    .forks(1).warmupIterations(3).warmupTime(TimeValue.milliseconds(500))
                    .measurementIterations(5).measurementTime(TimeValue.milliseconds(500));
            case "full" -> o.include("org\\.mamba4j\\.bench\\.(InferenceBench|JniBench|TrainStepBench|LogitsBench)\\.");
            default -> throw new IllegalArgumentException("suite must be quick or full, not " + suite);
        }
        json.toAbsolutePath().getParent().toFile().mkdirs();
        new Runner(o.build()).run();
    }

    /**
     * Measures the given results' benchmarks again, longer than the quick suite (2 forks, 3 × 0.5 s warm-up and
     * 10 × 0.5 s measurement each, with the same parameters), and writes one JMH JSON with all of them: the second
     * look that a regression flagged by one short run must survive before it fails a build.
     */
    public static void confirm(List<BenchResult> suspects, Path json) throws Exception {
        List<BenchResult> all = new ArrayList<>();
        Path dir = json.toAbsolutePath().getParent();
        dir.toFile().mkdirs();
        for (BenchResult r : suspects) {
            Path one = Files.createTempFile(dir, "confirm-", ".json");
            ChainedOptionsBuilder o = options(one).include("^" + Pattern.quote(r.benchmark()) + "$")
                    .mode(Mode.deepValueOf(r.mode()))
                    .forks(2).warmupIterations(3).warmupTime(TimeValue.milliseconds(500))
                    .measurementIterations(10).measurementTime(TimeValue.milliseconds(500));
            r.params().forEach(o::param);
            new Runner(o.build()).run();
            all.addAll(JmhJson.read(one));
            Files.delete(one);
        }
        JmhJson.write(json, all);
    }

    private static ChainedOptionsBuilder options(Path json) {
        List<String> jvmArgs = new ArrayList<>(List.of("--enable-native-access=ALL-UNNAMED"));
        for (String key : System.getProperties().stringPropertyNames())
            if (key.startsWith("org.bytedeco.")) jvmArgs.add("-D" + key + "=" + System.getProperty(key));
        return new OptionsBuilder()
                .jvmArgsAppend(jvmArgs.toArray(String[]::new))
                .resultFormat(ResultFormatType.JSON)
                .result(json.toAbsolutePath().toString())
                .shouldFailOnError(true);
    }
}
