package org.mamba4j.samples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;

/** Keeps the README's quick start true: its code block is QuickStart's marked region, which compiles and runs. */
class ReadmeQuickStartTest {
    private static String region(String text, String begin, String end) {
        int a = text.indexOf(begin), b = text.indexOf(end);
        assertTrue(a >= 0 && b > a, "markers " + begin + " / " + end + " not found");
        String body = text.substring(text.indexOf('\n', a) + 1, b);
        body = body.substring(0, body.lastIndexOf('\n') + 1);
        StringBuilder out = new StringBuilder();
        int indent = Integer.MAX_VALUE;
        for (String line : body.split("\n")) if (!line.isBlank()) indent = Math.min(indent, line.length() - line.stripLeading().length());
        for (String line : body.split("\n")) out.append(line.isBlank() ? "" : line.substring(indent).stripTrailing()).append('\n');
        return out.toString();
    }

    @Test
    void readmeBlockIsTheCompiledQuickStart() throws IOException {
        Path root = Path.of("").toAbsolutePath().getParent();
        String readme = Files.readString(root.resolve("README.md"));
        String source = Files.readString(root.resolve("samples/src/main/java/org/mamba4j/samples/QuickStart.java"));
        String fromReadme = region(readme, "<!-- README-QUICKSTART-BEGIN -->", "<!-- README-QUICKSTART-END -->")
                .replace("```java\n", "").replace("```\n", "");
        String fromSource = region(source, "// README-QUICKSTART-BEGIN", "// README-QUICKSTART-END");
        assertEquals(fromSource, fromReadme);
    }

    @Test
    void quickStartRuns() {
        PrintStream old = System.out;
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        System.setOut(new PrintStream(buf, true, StandardCharsets.UTF_8));
        try {
            QuickStart.main(new String[0]);
        } finally {
            System.setOut(old);
        }
        assertTrue(buf.toString(StandardCharsets.UTF_8).startsWith("prefill -> 512 floats, step -> 512 floats"), buf.toString());
    }
}
