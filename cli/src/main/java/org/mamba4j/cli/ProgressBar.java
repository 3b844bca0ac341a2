package org.mamba4j.cli;

import java.io.PrintWriter;

/**
 * Load progress on stderr. On an interactive terminal a one-line bar redrawn in place with carriage returns (at most
 * every percent); otherwise (redirected, piped, tests) nothing until {@link #finish()}, which prints one plain line.
 */
final class ProgressBar {
    private static final int WIDTH = 30;
    private final PrintWriter out;
    private final String label;
    private final boolean redraw;
    private final long start = System.nanoTime();
    private int lastPercent = -1;
    private long done, total;

    ProgressBar(PrintWriter out, String label) {
        this(out, label, Terminal.stderrIsInteractive());
    }

    ProgressBar(PrintWriter out, String label, boolean redraw) {
        this.out = out;
        this.label = label;
        this.redraw = redraw;
    }

    void update(long done, long total) {
        this.done = done;
        this.total = total;
        int percent = total <= 0 ? 100 : (int) Math.min(100, done * 100 / total);
        if (percent == lastPercent) return;
        lastPercent = percent;
        if (!redraw) return;
        int filled = percent * WIDTH / 100;
        out.print("\r" + label + " [" + "#".repeat(filled) + " ".repeat(WIDTH - filled) + "] " + percent + "% ("
                + (done >> 20) + "/" + (total >> 20) + " MiB)");
        out.flush();
    }

    void finish() {
        if (lastPercent < 0) return;
        if (redraw) out.println();
        else out.printf("%s: %d%% (%d/%d MiB in %.1f s)%n", label, lastPercent, done >> 20, total >> 20,
                (System.nanoTime() - start) / 1e9);
        out.flush();
    }
}
