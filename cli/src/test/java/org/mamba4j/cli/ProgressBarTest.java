package org.mamba4j.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.PrintWriter;
import java.io.StringWriter;
import org.junit.jupiter.api.Test;

/** The two modes of the load progress bar: redrawn in place on a terminal, one plain line otherwise. */
class ProgressBarTest {
    private static String draw(boolean terminal) {
        StringWriter out = new StringWriter();
        ProgressBar bar = new ProgressBar(new PrintWriter(out), "loading m", terminal);
        for (int i = 0; i <= 10; i++) bar.update(i << 20, 10L << 20);
        bar.finish();
        return out.toString();
    }

    @Test
    void onATerminalTheBarIsRedrawnInPlace() {
        String s = draw(true);
        assertEquals(11, s.chars().filter(c -> c == '\r').count(), s);
        assertTrue(s.endsWith("] 100% (10/10 MiB)" + System.lineSeparator()), s);
    }

    @Test
    void elsewhereOnePlainLine() {
        String s = draw(false);
        assertTrue(s.matches("loading m: 100% \\(10/10 MiB in \\d+\\.\\d s\\)\\R"), s);
    }
}
