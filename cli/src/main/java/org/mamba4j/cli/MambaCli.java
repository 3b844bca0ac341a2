package org.mamba4j.cli;

import java.io.PrintWriter;
import picocli.CommandLine;
import picocli.CommandLine.Command;

/**
 * {@code mamba4j} — run Mamba language models from the command line.
 * Bad input ends with exit code 2 (usage) or 1 (anything else) and one clear line on stderr.
 */
@Command(name = "mamba4j", mixinStandardHelpOptions = true, versionProvider = Version.class,
        description = "Mamba state-space language models on the CPU or an NVIDIA GPU.",
        subcommands = {GenerateCommand.class, InfoCommand.class, ConvertCommand.class, CommandLine.HelpCommand.class})
public final class MambaCli {
    private MambaCli() {}

    public static void main(String[] args) {
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
