package org.mamba4j.cli;

/**
 * Logging defaults of the command line, set before anything logs. The library logs through System.Logger and DJL and
 * JavaCPP through SLF4J; the CLI ships slf4j-simple (settings in simplelogger.properties: warnings and errors only, on
 * stderr) and slf4j-jdk-platform-logging, which sends System.Logger to the same provider. {@code --verbose} turns on
 * debug output of mamba4j (native loading, device selection) and of JavaCPP's loader.
 */
final class Logging {
    private Logging() {}

    static void configure(boolean verbose) {
        // JavaCPP's own logger would print to stderr directly; route it through SLF4J like everything else.
        System.setProperty("org.bytedeco.javacpp.logger", "slf4j");
        if (verbose) {
            System.setProperty("org.slf4j.simpleLogger.log.org.mamba4j", "debug");
            System.setProperty("org.slf4j.simpleLogger.log.org.bytedeco.javacpp", "debug");
        }
    }

    /** True if the arguments ask for debug logging (before picocli parses them: logging must be set up first). */
    static boolean verboseRequested(String[] args) {
        for (String a : args) {
            if (a.equals("--")) return false;
            if (a.equals("-v") || a.equals("--verbose")) return true;
        }
        return false;
    }
}
