package org.mamba4j.bench;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * The performance-regression check: compares benchmark results (JMH JSON) with a stored baseline of the same machine
 * kind, prints a table and exits non-zero on a regression beyond noise.
 *
 * <pre>
 *   java -cp benchmarks/target/benchmarks.jar org.mamba4j.bench.BenchCompare \
 *       [--run quick|full] [--current FILE] --baseline benchmarks/baselines/cpu-2vcpu.json [--band 0.25]
 * </pre>
 *
 * <p>With {@code --run} the suite ({@link BenchSuite}) runs first and writes {@code --current} (default
 * {@code benchmarks/target/bench/current.json}). A result is a <b>regression</b> when it is worse than the baseline by
 * more than {@code band × baseline + error(baseline) + error(current)} — the score errors are JMH's 99.9% half-widths,
 * so both runs' noise is allowed for, and {@code band} adds a margin for what the errors miss (other load on the
 * machine, frequency changes). "Worse" is a larger time per operation, or a smaller throughput. Symmetrically, a
 * result better by more than that margin is reported as faster (not a failure: record a new baseline).
 *
 * <p>With {@code --run}, benchmarks flagged as regressions are measured once more, longer ({@link
 * BenchSuite#confirm}), and that second measurement decides: a short run on a shared machine is easily slowed by other
 * work for a few seconds.
 *
 * <p>Exit codes: 0 no regression; 1 at least one regression (or a changed unit); 2 a baseline benchmark is missing
 * from the current run, or bad arguments.
 */
public final class BenchCompare {
    /** The verdict on one baseline result. */
    enum Verdict { OK, FASTER, REGRESSION, MISSING, UNIT_CHANGED }

    private BenchCompare() {}

    public static void main(String[] args) throws Exception {
        Path current = Path.of("benchmarks", "target", "bench", "current.json"), baseline = null;
        String run = null;
        double band = 0.25;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--run" -> run = args[++i];
                case "--current" -> current = Path.of(args[++i]);
                case "--baseline" -> baseline = Path.of(args[++i]);
                case "--band" -> band = Double.parseDouble(args[++i]);
                default -> usage("unknown argument " + args[i]);
            }
        }
        if (baseline == null) usage("--baseline FILE is required");
        if (!Files.isRegularFile(baseline)) usage("no baseline file " + baseline);
        if (run != null) BenchSuite.run(run, current);
        if (!Files.isRegularFile(current)) usage("no results file " + current + " (run the suite with --run quick)");
        List<BenchResult> base = JmhJson.read(baseline), cur = JmhJson.read(current);
        int code = compare(base, cur, band, baseline, current);
        if (code == 1 && run != null) {
            // One short run on a shared machine can be slowed for seconds by other work; a regression must show
            // again in a longer second measurement of just the flagged benchmarks before it fails the build.
            Path confirmFile = current.resolveSibling("confirm.json");
            List<BenchResult> suspects = regressions(base, cur, band);
            System.out.printf(Locale.ROOT, "%nmeasuring the %d flagged benchmark(s) again, longer (2 forks × 10 × 0.5 s)%n%n",
                    suspects.size());
            BenchSuite.confirm(suspects, confirmFile);
            code = compare(suspects, JmhJson.read(confirmFile), band, baseline, confirmFile);
        }
        System.exit(code);
    }

    /** The baseline results the current run regresses on (or changed the unit of). */
    static List<BenchResult> regressions(List<BenchResult> baseline, List<BenchResult> current, double band) {
        Map<String, BenchResult> byKey = new LinkedHashMap<>();
        for (BenchResult r : current) byKey.put(r.key(), r);
        List<BenchResult> out = new java.util.ArrayList<>();
        for (BenchResult b : baseline) {
            Verdict v = verdict(b, byKey.get(b.key()), band);
            if (v == Verdict.REGRESSION || v == Verdict.UNIT_CHANGED) out.add(b);
        }
        return out;
    }

    private static void usage(String why) {
        System.err.println("BenchCompare: " + why);
        System.err.println("usage: BenchCompare [--run quick|full] [--current FILE] --baseline FILE [--band FRACTION]");
        System.exit(2);
    }

    static Verdict verdict(BenchResult base, BenchResult cur, double band) {
        if (cur == null) return Verdict.MISSING;
        if (!base.unit().equals(cur.unit())) return Verdict.UNIT_CHANGED;
        double worse = base.higherIsBetter() ? base.score() - cur.score() : cur.score() - base.score();
        double margin = band * base.score() + finite(base.error()) + finite(cur.error());
        if (worse > margin) return Verdict.REGRESSION;
        if (-worse > margin) return Verdict.FASTER;
        return Verdict.OK;
    }

    private static double finite(double error) {
        return Double.isFinite(error) ? error : 0;
    }

    /** Prints the table and returns the exit code. */
    static int compare(List<BenchResult> baseline, List<BenchResult> current, double band, Path baseFile, Path curFile) {
        Map<String, BenchResult> byKey = new LinkedHashMap<>();
        for (BenchResult r : current) byKey.put(r.key(), r);
        System.out.printf(Locale.ROOT, "baseline %s%ncurrent  %s%nregression = worse by more than %.0f%% of the baseline"
                + " + both score errors (99.9%%)%n%n", baseFile, curFile, 100 * band);
        int nameWidth = 9, paramWidth = 6;
        for (List<BenchResult> list : List.of(baseline, current))
            for (BenchResult r : list) {
                nameWidth = Math.max(nameWidth, r.shortName().length());
                paramWidth = Math.max(paramWidth, r.paramString().length());
            }
        String format = "%-" + nameWidth + "s  %-" + paramWidth + "s  %22s  %22s  %8s  %s%n";
        System.out.printf(Locale.ROOT, format, "benchmark", "params", "baseline", "current", "change", "verdict");
        int regressions = 0, missing = 0, faster = 0;
        for (BenchResult b : baseline) {
            BenchResult c = byKey.remove(b.key());
            Verdict v = verdict(b, c, band);
            String change = c == null ? "" : String.format(Locale.ROOT, "%+.1f%%", 100 * (c.score() / b.score() - 1));
            System.out.printf(Locale.ROOT, format, b.shortName(), b.paramString(), score(b), c == null ? "-" : score(c), change,
                    v.name().toLowerCase(Locale.ROOT).replace('_', ' ') + (b.higherIsBetter() ? " (higher is better)" : ""));
            if (v == Verdict.REGRESSION || v == Verdict.UNIT_CHANGED) regressions++;
            if (v == Verdict.MISSING) missing++;
            if (v == Verdict.FASTER) faster++;
        }
        for (BenchResult c : byKey.values())
            System.out.printf(Locale.ROOT, format, c.shortName(), c.paramString(), "-", score(c), "", "new (not in the baseline)");
        System.out.printf(Locale.ROOT, "%n%d compared: %d regression(s), %d faster, %d missing, %d new%n", baseline.size(),
                regressions, faster, missing, byKey.size());
        if (regressions > 0) return 1;
        return missing > 0 ? 2 : 0;
    }

    private static String score(BenchResult r) {
        String err = Double.isFinite(r.error()) ? String.format(Locale.ROOT, " ± %s", num(r.error())) : "";
        return num(r.score()) + err + " " + r.unit();
    }

    private static String num(double v) {
        double a = Math.abs(v);
        return String.format(Locale.ROOT, a >= 100 ? "%.0f" : a >= 10 ? "%.1f" : a >= 1 ? "%.2f" : "%.3g", v);
    }
}
