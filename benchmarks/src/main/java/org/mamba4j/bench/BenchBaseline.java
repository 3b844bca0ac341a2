package org.mamba4j.bench;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Makes a baseline from several runs of the same suite: for each benchmark the run with the best score (shortest time,
 * highest throughput), with that run's error. On a machine shared with other work the best of a few runs is the
 * closest to what the machine can do; a single run recorded while something else was busy would hide regressions.
 *
 * <pre>
 *   java -cp benchmarks/target/benchmarks.jar org.mamba4j.bench.BenchBaseline OUT.json RUN1.json RUN2.json ...
 * </pre>
 */
public final class BenchBaseline {
    private BenchBaseline() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: BenchBaseline OUT.json RUN.json [RUN.json...]");
            System.exit(2);
        }
        List<List<BenchResult>> runs = new ArrayList<>();
        for (int i = 1; i < args.length; i++) runs.add(JmhJson.read(Path.of(args[i])));
        JmhJson.write(Path.of(args[0]), best(runs));
        System.out.println("wrote " + args[0] + " (best of " + runs.size() + " runs)");
    }

    static List<BenchResult> best(List<List<BenchResult>> runs) {
        Map<String, BenchResult> best = new LinkedHashMap<>();
        for (List<BenchResult> run : runs)
            for (BenchResult r : run)
                best.merge(r.key(), r, (a, b) -> (b.higherIsBetter() ? b.score() > a.score() : b.score() < a.score()) ? b : a);
        return new ArrayList<>(best.values());
    }
}
