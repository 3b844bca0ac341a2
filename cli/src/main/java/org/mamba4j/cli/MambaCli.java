package org.mamba4j.cli;

import java.io.PrintWriter;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.ScopeType;

/**
 * {@code mamba4j} — run Mamba language models from the command line.
 * Bad input ends with exit code 2 (usage) or 1 (anything else) and one clear line on stderr.
 */
@Command(name = "mamba4j", mixinStandardHelpOptions = true, versionProvider = Version.class,
        description = "Mamba state-space language models on the CPU or an NVIDIA GPU.",
        subcommands = {GenerateCommand.class, InfoCommand.class, ConvertCommand.class, FinetuneCommand.class, CommandLine.HelpCommand.class})
public final class MambaCli {
    // Read before parsing (Logging.verboseRequested): logging is configured before anything logs. Declared here so
    // that every command accepts it and lists it in --help.
    @Option(names = {"-v", "--verbose"}, scope = ScopeType.INHERIT,
            description = "Debug logging on stderr: native library loading and device selection")
    boolean verbose;

    private MambaCli() {}

    public static void main(String[] args) {
        Logging.configure(Logging.verboseRequested(args));
        System.exit(run(args, new PrintWriter(System.out, true), new PrintWriter(System.err, true)));
    }

    /** Runs one command line; returns the exit code (tests call this instead of main). */
    public static int run(String[] args, PrintWriter out, PrintWriter err) {
        CommandLine cli = new CommandLine(new MambaCli());
        cli.setOut(out);
        cli.setErr(err);
        cli.setExecutionExceptionHandler((e, cmd, parsed) -> {
            err.println("mamba4j: " + (e.getMessage() == null ? e.toString() : e.getMessage()));
            return 1;
        });
        return cli.execute(args);
    }
}
