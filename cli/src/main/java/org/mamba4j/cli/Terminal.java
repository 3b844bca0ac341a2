package org.mamba4j.cli;

import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Whether stderr is an interactive terminal, so progress can be redrawn in place. False when the JVM has no console
 * (input or output redirected) or when stderr itself goes to a file or a pipe (read from /proc on Linux); then
 * progress bars print plain lines and never write carriage returns or escape sequences into logs. The samples keep a
 * copy (org.mamba4j.samples.Terminal): see there why it is not shared.
 */
final class Terminal {
    private static final boolean INTERACTIVE = detect();

    private Terminal() {}

    static boolean stderrIsInteractive() {
        return INTERACTIVE;
    }

    private static boolean detect() {
        if (System.console() == null || "dumb".equals(System.getenv("TERM"))) return false;
        Path fd2 = Path.of("/proc/self/fd/2");
        try {
            String target = Files.readSymbolicLink(fd2).toString();
            return target.startsWith("/dev/pts/") || target.startsWith("/dev/tty");
        } catch (Exception e) {
            return true;  // no /proc: trust the console
        }
    }
}
