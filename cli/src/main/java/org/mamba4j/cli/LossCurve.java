package org.mamba4j.cli;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import org.knowm.xchart.BitmapEncoder;
import org.knowm.xchart.XYChart;
import org.knowm.xchart.XYChartBuilder;
import org.knowm.xchart.XYSeries;
import org.knowm.xchart.style.Styler;
import org.knowm.xchart.style.markers.SeriesMarkers;

/**
 * The curve of a {@code finetune} run as a PNG (XChart, 1000 × 560): the loss of every step and its exponential
 * moving average on the left axis, next-token accuracy on the right. (The selective-copying sample draws its own:
 * the two applications share only the published library.)
 */
final class LossCurve {
    private static final double SMOOTHING = 0.9;
    private final String title;
    private final double[] step, loss, smoothed, accuracy;
    private int n;

    LossCurve(String title, int steps) {
        this.title = title;
        step = new double[steps];
        loss = new double[steps];
        smoothed = new double[steps];
        accuracy = new double[steps];
    }

    void add(int s, double stepLoss, double stepAccuracy) {
        step[n] = s;
        loss[n] = stepLoss;
        smoothed[n] = n == 0 ? stepLoss : SMOOTHING * smoothed[n - 1] + (1 - SMOOTHING) * stepLoss;
        accuracy[n] = stepAccuracy;
        n++;
    }

    /** Writes the PNG into {@code file} (a new file; the caller writes it inside a folder that is renamed into place). */
    void writePng(Path file) throws IOException {
        if (n == 0) throw new IllegalStateException("no steps recorded");
        if (System.getProperty("java.awt.headless") == null) System.setProperty("java.awt.headless", "true");
        XYChart chart = new XYChartBuilder().width(1000).height(560).title(title).xAxisTitle("step").yAxisTitle("loss").build();
        chart.getStyler().setLegendPosition(Styler.LegendPosition.OutsideS).setLegendLayout(Styler.LegendLayout.Horizontal);
        chart.getStyler().setYAxisGroupPosition(1, Styler.YAxisPosition.Right);
        chart.getStyler().setYAxisMin(1, 0.0).setYAxisMax(1, 1.0);
        chart.setYAxisGroupTitle(1, "next-token accuracy");
        series(chart, "loss", loss, 0).setMarker(SeriesMarkers.CIRCLE);
        series(chart, "loss (moving average)", smoothed, 0);
        series(chart, "accuracy", accuracy, 1);
        try (OutputStream out = Files.newOutputStream(file)) {
            BitmapEncoder.saveBitmap(chart, out, BitmapEncoder.BitmapFormat.PNG);
        }
    }

    private XYSeries series(XYChart chart, String name, double[] y, int axis) {
        XYSeries s = chart.addSeries(name, java.util.Arrays.copyOf(step, n), java.util.Arrays.copyOf(y, n));
        s.setMarker(SeriesMarkers.NONE);
        s.setYAxisGroup(axis);
        return s;
    }
}
