package org.mamba4j.samples;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import org.knowm.xchart.BitmapEncoder;
import org.knowm.xchart.XYChart;
import org.knowm.xchart.XYChartBuilder;
import org.knowm.xchart.XYSeries;
import org.knowm.xchart.style.Styler;
import org.knowm.xchart.style.markers.SeriesMarkers;

/**
 * The training curve of a run — loss (left axis) and accuracy (right axis) against the step — drawn as a PNG
 * with XChart: the smoothed training values every step, the evaluations on fresh data as marked points.
 */
final class TrainingCurve {
    private final String title;
    private final List<double[]> train = new ArrayList<>();  // step, loss, accuracy
    private final List<double[]> eval = new ArrayList<>();

    TrainingCurve(String title) {
        this.title = title;
    }

    void train(int step, double loss, double accuracy) {
        train.add(new double[] {step, loss, accuracy});
    }

    void eval(int step, double loss, double accuracy) {
        eval.add(new double[] {step, loss, accuracy});
    }

    /** Writes the PNG (to {@code <file>.tmp} first, then moved into place), 1000 × 560 pixels. */
    void writePng(Path file) throws IOException {
        if (train.isEmpty()) throw new IllegalStateException("no training steps recorded");
        if (System.getProperty("java.awt.headless") == null) System.setProperty("java.awt.headless", "true");
        XYChart chart = new XYChartBuilder().width(1000).height(560).title(title).xAxisTitle("step").yAxisTitle("loss").build();
        Styler styler = chart.getStyler();
        styler.setLegendPosition(Styler.LegendPosition.OutsideS);
        styler.setLegendLayout(Styler.LegendLayout.Horizontal);
        styler.setYAxisGroupPosition(1, Styler.YAxisPosition.Right);
        chart.getStyler().setYAxisMin(1, 0.0).setYAxisMax(1, 1.0);
        chart.setYAxisGroupTitle(1, "accuracy");
        line(chart.addSeries("train loss (smoothed)", column(train, 0), column(train, 1)), 0);
        line(chart.addSeries("train accuracy (smoothed)", column(train, 0), column(train, 2)), 1);
        if (!eval.isEmpty()) {
            points(chart.addSeries("eval loss", column(eval, 0), column(eval, 1)), 0);
            points(chart.addSeries("eval accuracy", column(eval, 0), column(eval, 2)), 1);
        }
        Path absolute = file.toAbsolutePath();
        Files.createDirectories(absolute.getParent());
        Path tmp = absolute.resolveSibling(absolute.getFileName() + ".tmp");
        try {
            try (OutputStream out = Files.newOutputStream(tmp)) {
                BitmapEncoder.saveBitmap(chart, out, BitmapEncoder.BitmapFormat.PNG);
            }
            Files.move(tmp, absolute, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        } finally {
            Files.deleteIfExists(tmp);
        }
    }

    private static void line(XYSeries s, int axis) {
        s.setMarker(SeriesMarkers.NONE);
        s.setYAxisGroup(axis);
    }

    private static void points(XYSeries s, int axis) {
        s.setMarker(SeriesMarkers.CIRCLE);
        s.setYAxisGroup(axis);
    }

    private static double[] column(List<double[]> rows, int c) {
        double[] out = new double[rows.size()];
        for (int i = 0; i < out.length; i++) out[i] = rows.get(i)[c];
        return out;
    }
}
