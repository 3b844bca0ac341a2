package org.mamba4j.samples;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.awt.image.BufferedImage;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashSet;
import java.util.Set;
import javax.imageio.ImageIO;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;

/** The selective-copying sample draws its training curve: a real PNG image with plotted content, not a blank canvas. */
class TrainingCurveTest {
    @TempDir Path dir;

    @Test
    void aShortRunWritesAPngOfTheCurve() throws IOException {
        Path png = dir.resolve("curve.png");
        PrintStream old = System.out;
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        System.setOut(new PrintStream(buf, true, StandardCharsets.UTF_8));
        int code;
        try {
            code = new CommandLine(new SelectiveCopying()).execute("--length", "16", "--tokens", "2", "--symbols", "4",
                    "--d-model", "16", "--layers", "1", "--batch", "8", "--steps", "40", "--log-every", "10", "--threads", "1",
                    "--out", dir.resolve("m.safetensors").toString(), "--chart", png.toString());
        } finally {
            System.setOut(old);
        }
        String out = buf.toString(StandardCharsets.UTF_8);
        assertEquals(0, code, out);
        assertTrue(out.contains("training curve: " + png), out);

        byte[] bytes = Files.readAllBytes(png);
        assertArrayEquals(new byte[] {(byte) 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'}, java.util.Arrays.copyOf(bytes, 8), "PNG signature");
        BufferedImage image = ImageIO.read(png.toFile());
        assertNotNull(image, "ImageIO reads it");
        assertEquals(1000, image.getWidth());
        assertEquals(560, image.getHeight());
        Set<Integer> colours = new HashSet<>();
        for (int y = 0; y < image.getHeight(); y += 2)
            for (int x = 0; x < image.getWidth(); x += 2) colours.add(image.getRGB(x, y));
        assertTrue(colours.size() > 16, "lines, text and axes in several colours, not a blank image: " + colours.size() + " colours");
        assertTrue(Files.list(dir).noneMatch(p -> p.toString().endsWith(".tmp")), "no temporary file left behind");
    }
}
