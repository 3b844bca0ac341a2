package org.mamba4j.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The regression rule: worse by more than band × baseline + both score errors fails; noise does not. */
class BenchCompareTest {
    @TempDir Path dir;

    private static BenchResult avgt(double score, double error) {
        return new BenchResult("org.mamba4j.bench.InferenceBench.step", "avgt", Map.of("shape", "default"), score, error, "us/op", Map.of());
    }

    private static BenchResult thrpt(double score, double error) {
        return new BenchResult("org.mamba4j.bench.TrainStepBench.tokensPerSecond", "thrpt", Map.of(), score, error, "ops/s", Map.of());
    }

    @Test
    void timesPerOperation() {
        BenchResult base = avgt(100, 5);
        assertEquals(BenchCompare.Verdict.OK, BenchCompare.verdict(base, avgt(134, 5), 0.25), "34 < 25 + 5 + 5");
        assertEquals(BenchCompare.Verdict.REGRESSION, BenchCompare.verdict(base, avgt(136, 5), 0.25));
        assertEquals(BenchCompare.Verdict.OK, BenchCompare.verdict(base, avgt(136, 8), 0.25), "a noisier run is allowed more");
        assertEquals(BenchCompare.Verdict.FASTER, BenchCompare.verdict(base, avgt(60, 5), 0.25));
        assertEquals(BenchCompare.Verdict.OK, BenchCompare.verdict(base, avgt(130, Double.NaN), 0.25), "NaN error counts as 0");
    }

    @Test
    void throughputIsBetterWhenHigher() {
        BenchResult base = thrpt(1000, 10);
        assertEquals(BenchCompare.Verdict.REGRESSION, BenchCompare.verdict(base, thrpt(700, 10), 0.25));
        assertEquals(BenchCompare.Verdict.FASTER, BenchCompare.verdict(base, thrpt(1300, 10), 0.25));
        assertEquals(BenchCompare.Verdict.OK, BenchCompare.verdict(base, thrpt(800, 10), 0.25));
    }

    @Test
    void missingAndChangedUnits() {
        assertEquals(BenchCompare.Verdict.MISSING, BenchCompare.verdict(avgt(1, 0), null, 0.25));
        BenchResult ms = new BenchResult("org.mamba4j.bench.InferenceBench.step", "avgt", Map.of("shape", "default"), 1, 0, "ms/op", Map.of());
        assertEquals(BenchCompare.Verdict.UNIT_CHANGED, BenchCompare.verdict(avgt(1, 0), ms, 0.25));
    }

    @Test
    void exitCodes() throws Exception {
        Path b = dir.resolve("b.json"), c = dir.resolve("c.json");
        JmhJson.write(b, List.of(avgt(100, 1), thrpt(1000, 1)));
        JmhJson.write(c, List.of(avgt(101, 1), thrpt(990, 1)));
        assertEquals(0, BenchCompare.compare(JmhJson.read(b), JmhJson.read(c), 0.25, b, c));
        JmhJson.write(c, List.of(avgt(200, 1), thrpt(990, 1)));
        assertEquals(1, BenchCompare.compare(JmhJson.read(b), JmhJson.read(c), 0.25, b, c));
        JmhJson.write(c, List.of(avgt(100, 1)));
        assertEquals(2, BenchCompare.compare(JmhJson.read(b), JmhJson.read(c), 0.25, b, c), "a baseline benchmark did not run");
    }

    @Test
    void onlyTheRegressedBenchmarksAreMeasuredAgain() {
        List<BenchResult> base = List.of(avgt(100, 1), thrpt(1000, 1));
        assertEquals(List.of(avgt(100, 1)), BenchCompare.regressions(base, List.of(avgt(200, 1), thrpt(990, 1)), 0.25));
        assertEquals(List.of(thrpt(1000, 1)), BenchCompare.regressions(base, List.of(avgt(90, 1), thrpt(500, 1)), 0.25));
        assertEquals(List.of(), BenchCompare.regressions(base, List.of(avgt(101, 1)), 0.25), "a missing result is not re-run");
    }

    @Test
    void aBaselineIsTheBestOfItsRuns() {
        List<BenchResult> best = BenchBaseline.best(List.of(List.of(avgt(120, 9), thrpt(900, 1)), List.of(avgt(100, 2), thrpt(800, 1))));
        assertEquals(List.of(avgt(100, 2), thrpt(900, 1)), best);
    }

    @Test
    void jsonRoundTripKeepsEverything() throws Exception {
        Path f = dir.resolve("r.json");
        BenchResult r = new BenchResult("org.mamba4j.bench.GpuDecodeBench.step", "avgt", Map.of("model", "130m", "batch", "1"),
                318.3, 1.2, "us/op", Map.of("floor", 42.0));
        JmhJson.write(f, List.of(r));
        assertEquals(List.of(r), JmhJson.read(f));
    }
}
