package org.mamba4j.bench;

import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Collectors;

/**
 * One benchmark result as JMH writes it in JSON ({@code -rf json}): the benchmark's name, its mode, its parameters,
 * the score with JMH's score error (half-width of the 99.9% confidence interval) and unit, and the secondary
 * metrics by name (score only). The GPU benchmark programs write the same shape.
 */
public record BenchResult(String benchmark, String mode, Map<String, String> params, double score, double error,
                          String unit, Map<String, Double> secondary) {
    public BenchResult {
        params = new TreeMap<>(params);
        secondary = new TreeMap<>(secondary);
    }

    /** The short benchmark name (class.method, without the package). */
    public String shortName() {
        String[] parts = benchmark.split("\\.");
        return parts.length >= 2 ? parts[parts.length - 2] + "." + parts[parts.length - 1] : benchmark;
    }

    /** {@code k=v,k=v} in key order, or "" without parameters. */
    public String paramString() {
        return params.entrySet().stream().map(e -> e.getKey() + "=" + e.getValue()).collect(Collectors.joining(","));
    }

    /** What identifies a result across runs: benchmark, mode and parameters. */
    public String key() {
        return benchmark + " [" + mode + "] " + paramString();
    }

    /** True when a larger score is better (throughput); false for times per operation. */
    public boolean higherIsBetter() {
        return mode.equals("thrpt");
    }
}
