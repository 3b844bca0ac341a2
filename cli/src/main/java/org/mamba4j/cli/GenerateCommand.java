package org.mamba4j.cli;

import java.io.PrintWriter;
import java.util.concurrent.Callable;
import org.mamba4j.lm.MambaLM;
import org.mamba4j.lm.Sampling;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;
import picocli.CommandLine.Model.CommandSpec;

/** {@code mamba4j generate}: streams generated text to stdout as it is produced. */
@Command(name = "generate", mixinStandardHelpOptions = true, versionProvider = Version.class,
        description = "Generate text from a prompt, streaming it as it is produced.")
final class GenerateCommand implements Callable<Integer> {
    @Spec CommandSpec spec;
    @Mixin ModelOptions model;

    @Option(names = {"-p", "--prompt"}, required = true, description = "The prompt text")
    String prompt;

    @Option(names = {"-n", "--max-new-tokens"}, defaultValue = "128", description = "Tokens to generate at most (default: ${DEFAULT-VALUE})")
    int maxNewTokens;

    @Option(names = {"-t", "--temperature"}, defaultValue = "0", description = "0 = greedy (default), > 0 samples")
    double temperature;

    @Option(names = "--top-k", defaultValue = "0", description = "Keep the k most likely tokens (0 = off)")
    int topK;

    @Option(names = "--top-p", defaultValue = "1", description = "Nucleus sampling mass (1 = off)")
    double topP;

    @Option(names = "--min-p", defaultValue = "0", description = "Drop tokens below min-p × the top probability (0 = off)")
    double minP;

    @Option(names = "--repetition-penalty", defaultValue = "1", description = "> 1 discourages repeats (1 = off)")
    double repetitionPenalty;

    @Option(names = "--seed", defaultValue = "0", description = "Sampling seed: same seed, same text (default: ${DEFAULT-VALUE})")
    long seed;

    @Override
    public Integer call() {
        Sampling s;
        try {
            s = Sampling.greedy().temperature(temperature).topK(topK).topP(topP).minP(minP)
                    .repetitionPenalty(repetitionPenalty).seed(seed).maxNewTokens(maxNewTokens);
        } catch (RuntimeException e) {
            throw new ParameterException(spec.commandLine(), e.getMessage());
        }
        PrintWriter out = spec.commandLine().getOut(), err = spec.commandLine().getErr();
        try (MambaLM lm = model.load(err)) {
            long start = System.nanoTime();
            int[] count = {0};
            out.print(prompt);
            out.flush();
            lm.generate(prompt, s, piece -> {
                count[0]++;
                out.print(piece);
                out.flush();
            });
            out.println();
            double secs = (System.nanoTime() - start) / 1e9;
            err.printf("[%d text pieces in %.2f s on %s, %s]%n", count[0], secs, lm.model().device(), lm.model().dtype());
        }
        return 0;
    }
}
