package org.mamba4j.cli;

import java.io.PrintWriter;

/**
 * Training progress on stderr: step, loss and tokens per second. On an interactive terminal one line redrawn in place
 * (carriage returns, at most ten times a second); otherwise (redirected, piped, tests) a plain line at every tenth of
 * the run, so logs stay short and hold no carriage returns or escape sequences.
 */
final class TrainingProgress {
    private static final int WIDTH = 20;
    private static final long REDRAW_NANOS = 100_000_000L;
    private final PrintWriter out;
    private final long steps;
    private final boolean redraw;
    private final long start = System.nanoTime();
    private long lastDraw;
    private long lastTenth = 0;
    private boolean drawn;

    TrainingProgress(PrintWriter out, long steps) {
        this(out, steps, Terminal.stderrIsInteractive());
    }

    TrainingProgress(PrintWriter out, long steps, boolean redraw) {
        this.out = out;
        this.steps = steps;
        this.redraw = redraw;
    }

    /** Reports that {@code step} (1-based) steps are done, the last one with {@code loss}, {@code tokens} tokens in all. */
    void update(long step, double loss, long tokens) {
        long now = System.nanoTime();
        double tokensPerSecond = tokens / Math.max(1e-9, (now - start) / 1e9);
        if (redraw) {
            if (step < steps && drawn && now - lastDraw < REDRAW_NANOS) return;
            lastDraw = now;
            int filled = (int) (step * WIDTH / steps);
            out.print("\rstep " + step + "/" + steps + " [" + "#".repeat(filled) + " ".repeat(WIDTH - filled) + "] "
                    + line(loss, tokensPerSecond) + "   ");
            out.flush();
            drawn = true;
        } else {
            long tenth = step * 10 / steps;
            if (tenth == lastTenth && step != 1) return;
            lastTenth = tenth;
            out.println("step " + step + "/" + steps + ": " + line(loss, tokensPerSecond));
            out.flush();
        }
    }

    /** Ends the redrawn line (a plain log needs nothing). */
    void finish() {
        if (redraw && drawn) {
            out.println();
            out.flush();
        }
    }

    static String line(double loss, double tokensPerSecond) {
        return String.format("loss %.4f, %,.0f tokens/s", loss, tokensPerSecond);
    }
}
