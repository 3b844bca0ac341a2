package org.mamba4j.cli;

import java.io.PrintWriter;

/** A one-line text progress bar redrawn in place with carriage returns (at most every percent). */
final class ProgressBar {
    private static final int WIDTH = 30;
    private final PrintWriter out;
    private final String label;
    private int lastPercent = -1;

    ProgressBar(PrintWriter out, String label) {
        this.out = out;
        this.label = label;
    }

    void update(long done, long total) {
        int percent = total <= 0 ? 100 : (int) Math.min(100, done * 100 / total);
        if (percent == lastPercent) return;
        lastPercent = percent;
        int filled = percent * WIDTH / 100;
        out.print("\r" + label + " [" + "#".repeat(filled) + " ".repeat(WIDTH - filled) + "] " + percent + "% ("
                + (done >> 20) + "/" + (total >> 20) + " MiB)");
        out.flush();
    }

    void finish() {
        if (lastPercent >= 0) out.println();
        out.flush();
    }
}
