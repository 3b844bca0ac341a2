package org.mamba4j.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.awt.image.BufferedImage;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import javax.imageio.ImageIO;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** BenchChart draws the relative chart of two runs and the GPU decode chart from GpuDecodeBench-shaped results. */
class BenchChartTest {
    @TempDir Path dir;

    @Test
    void drawsBothCharts() throws Exception {
        List<BenchResult> gpu = new ArrayList<>();
        String[] models = {"130m", "370m", "1.4b", "2.8b"};
        double[] us = {318, 758, 1290, 2530}, floor = {43, 149, 592, 1240};
        for (int i = 0; i < models.length; i++)
            for (String dtype : new String[] {"F32", "BF16"}) {
                double k = dtype.equals("F32") ? 1.6 : 1.0;
                gpu.add(new BenchResult("org.mamba4j.bench.GpuDecodeBench.step", "avgt",
                        Map.of("model", models[i], "dtype", dtype, "graphs", "on", "batch", "1"), us[i] * k, 2, "us/op",
                        Map.of("floor", floor[i] * k)));
            }
        Path base = dir.resolve("base.json"), run = dir.resolve("run.json");
        JmhJson.write(base, gpu);
        List<BenchResult> slower = new ArrayList<>();
        for (BenchResult r : gpu)
            slower.add(new BenchResult(r.benchmark(), r.mode(), r.params(), r.score() * 1.05, r.error(), r.unit(), r.secondary()));
        JmhJson.write(run, slower);
        Path out = dir.resolve("charts");
        BenchChart.main(new String[] {"--out", out.toString(), base.toString(), run.toString()});
        for (String name : new String[] {"relative.png", "gpu-decode.png"}) {
            BufferedImage image = ImageIO.read(out.resolve(name).toFile());
            assertNotNull(image, name);
            assertEquals(1000, image.getWidth(), name);
            assertTrue(image.getHeight() >= 500, name);
        }
    }
}
