package org.mamba4j.samples;

import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Whether stderr is an interactive terminal, so progress can be redrawn in place. False when the JVM has no console
 * (input or output redirected) or when stderr itself goes to a file or a pipe (read from /proc on Linux). The CLI has
 * the same check (org.mamba4j.cli.Terminal), deliberately a copy: the only code the two applications share is the
 * published library (mamba-api; the samples do not depend on mamba-lm or on the CLI), and a console check is not
 * library API.
 */
final class Terminal {
    private static final boolean INTERACTIVE = detect();

    private Terminal() {}

    static boolean stderrIsInteractive() {
        return INTERACTIVE;
    }

    private static boolean detect() {
        if (System.console() == null || "dumb".equals(System.getenv("TERM"))) return false;
        try {
            String target = Files.readSymbolicLink(Path.of("/proc/self/fd/2")).toString();
            return target.startsWith("/dev/pts/") || target.startsWith("/dev/tty");
        } catch (Exception e) {
            return true;  // no /proc: trust the console
        }
    }
}
