package org.mamba4j.bench;

import java.awt.BasicStroke;
import java.awt.Color;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.knowm.xchart.BitmapEncoder;
import org.knowm.xchart.CategoryChart;
import org.knowm.xchart.CategoryChartBuilder;
import org.knowm.xchart.XYChart;
import org.knowm.xchart.XYChartBuilder;
import org.knowm.xchart.XYSeries;
import org.knowm.xchart.internal.chartpart.Chart;
import org.knowm.xchart.style.Styler;
import org.knowm.xchart.style.markers.SeriesMarkers;

/**
 * Turns benchmark JSON (JMH's format: JMH runs, baselines, {@code GpuDecodeBench --json}) into PNG charts for the docs.
 *
 * <pre>
 *   java -cp benchmarks/target/benchmarks.jar org.mamba4j.bench.BenchChart --out DIR FILE [FILE...]
 * </pre>
 * <ul>
 *   <li>{@code relative.png} (two or more files): each later file's time per operation relative to the first
 *       (a baseline), in percent — above 100 is slower — with the combined score error;</li>
 *   <li>{@code gpu-decode.png} (when a file holds {@code GpuDecodeBench} B = 1 graph steps): decode tokens/s against
 *       model size per dtype, with the weight-read floor (bytes ÷ HBM bandwidth) of the same run dashed.</li>
 * </ul>
 */
public final class BenchChart {
    private BenchChart() {}

    public static void main(String[] args) throws IOException {
        Path out = null;
        List<Path> files = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--out")) out = Path.of(args[++i]);
            else files.add(Path.of(args[i]));
        }
        if (out == null || files.isEmpty()) {
            System.err.println("usage: BenchChart --out DIR FILE [FILE...]");
            System.exit(2);
        }
        if (System.getProperty("java.awt.headless") == null) System.setProperty("java.awt.headless", "true");
        Files.createDirectories(out);
        List<List<BenchResult>> runs = new ArrayList<>();
        for (Path f : files) runs.add(JmhJson.read(f));
        int written = 0;
        if (runs.size() > 1) {
            save(relative(runs, files), out.resolve("relative.png"));
            written++;
        }
        for (List<BenchResult> run : runs) {
            XYChart decode = gpuDecode(run);
            if (decode != null) {
                save(decode, out.resolve("gpu-decode.png"));
                written++;
            }
        }
        if (written == 0) {
            System.err.println("BenchChart: nothing to draw: give a baseline and a run (relative.png), or GpuDecodeBench results");
            System.exit(2);
        }
    }

    private static void save(Chart<?, ?> chart, Path file) throws IOException {
        BitmapEncoder.saveBitmap(chart, file.toString(), BitmapEncoder.BitmapFormat.PNG);
        System.out.println("wrote " + file);
    }

    /** The benchmark and its parameter values (not names, to keep the axis readable). */
    private static String label(BenchResult r) {
        return r.shortName() + (r.params().isEmpty() ? "" : " " + String.join("/", r.params().values()));
    }

    static CategoryChart relative(List<List<BenchResult>> runs, List<Path> files) {
        CategoryChart chart = new CategoryChartBuilder().width(1000).height(650)
                .title("Time per operation relative to " + files.get(0).getFileName() + " (100% = same; above = slower)")
                .yAxisTitle("% of baseline (error bars: both runs' 99.9% errors)").build();
        chart.getStyler().setXAxisLabelRotation(15).setErrorBarsColorSeriesColor(true).setYAxisMin(0.0);
        chart.getStyler().setLegendPosition(Styler.LegendPosition.OutsideS).setLegendLayout(Styler.LegendLayout.Horizontal);
        Map<String, BenchResult> base = new LinkedHashMap<>();
        for (BenchResult r : runs.get(0)) base.put(r.key(), r);
        for (int i = 1; i < runs.size(); i++) {
            List<String> x = new ArrayList<>();
            List<Double> y = new ArrayList<>(), err = new ArrayList<>();
            for (BenchResult c : runs.get(i)) {
                BenchResult b = base.get(c.key());
                if (b == null || !b.unit().equals(c.unit())) continue;
                double ratio = c.higherIsBetter() ? b.score() / c.score() : c.score() / b.score();
                double e = (finite(b.error()) / b.score() + finite(c.error()) / c.score()) * ratio;
                x.add(label(c));
                y.add(100 * ratio);
                err.add(100 * e);
            }
            if (!x.isEmpty()) chart.addSeries(files.get(i).getFileName().toString(), x, y, err);
        }
        return chart;
    }

    /** Decode tokens/s (B = 1, graphs on) against model size, with the floor, or null without such results. */
    static XYChart gpuDecode(List<BenchResult> run) {
        Map<String, Double> sizes = Map.of("130m", 0.13, "370m", 0.37, "1.4b", 1.4, "2.8b", 2.8);
        Map<String, TreeMap<Double, double[]>> byDtype = new TreeMap<>();  // dtype -> size -> {tok/s, floor tok/s}
        for (BenchResult r : run) {
            if (!r.benchmark().endsWith("GpuDecodeBench.step") || !"1".equals(r.params().get("batch"))
                    || !"on".equals(r.params().get("graphs")) || !sizes.containsKey(r.params().get("model"))) continue;
            double floor = r.secondary().getOrDefault("floor", Double.NaN);
            byDtype.computeIfAbsent(r.params().get("dtype"), k -> new TreeMap<>())
                    .put(sizes.get(r.params().get("model")), new double[] {1e6 / r.score(), 1e6 / floor});
        }
        if (byDtype.isEmpty()) return null;
        XYChart chart = new XYChartBuilder().width(1000).height(600).title("GPU decode, B = 1, CUDA graphs: tokens/s vs model size")
                .xAxisTitle("parameters (billions, logarithmic)").yAxisTitle("tokens/s (logarithmic)").build();
        chart.getStyler().setXAxisLogarithmic(true).setYAxisLogarithmic(true);
        chart.getStyler().setLegendPosition(Styler.LegendPosition.InsideNE);
        BasicStroke dashed = new BasicStroke(2f, BasicStroke.CAP_BUTT, BasicStroke.JOIN_MITER, 10f, new float[] {8f, 6f}, 0f);
        Color[] colours = {new Color(0x1f77b4), new Color(0xff7f0e), new Color(0x2ca02c), new Color(0xd62728)};
        int i = 0;
        for (Map.Entry<String, TreeMap<Double, double[]>> e : byDtype.entrySet()) {
            Color colour = colours[i++ % colours.length];
            double[] x = e.getValue().keySet().stream().mapToDouble(Double::doubleValue).toArray();
            double[] tok = e.getValue().values().stream().mapToDouble(v -> v[0]).toArray();
            double[] floor = e.getValue().values().stream().mapToDouble(v -> v[1]).toArray();
            XYSeries measured = chart.addSeries(e.getKey() + " measured", x, tok);
            measured.setMarker(SeriesMarkers.CIRCLE);
            measured.setLineColor(colour);
            measured.setMarkerColor(colour);
            XYSeries bound = chart.addSeries(e.getKey() + " weight-read floor", x, floor);
            bound.setMarker(SeriesMarkers.NONE);
            bound.setLineStyle(dashed);
            bound.setLineColor(colour);
        }
        return chart;
    }

    private static double finite(double v) {
        return Double.isFinite(v) ? v : 0;
    }
}
