package org.mamba4j.cli;

import java.io.IOException;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Locale;
import java.util.concurrent.Callable;
import org.mamba4j.lm.MambaLM;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;
import picocli.CommandLine.Model.CommandSpec;

/**
 * {@code mamba4j convert}: a model folder → one mamba4j safetensors checkpoint (f32, config in metadata), or, with
 * {@code --format official}, → a folder in the official state-spaces/mamba layout (config.json + model.safetensors,
 * tokenizer files copied along).
 */
@Command(name = "convert", mixinStandardHelpOptions = true, versionProvider = Version.class,
        description = "Convert a model folder into a single mamba4j checkpoint (loadable with MambaModel.load), or with"
                + " --format official into a folder in the official state-spaces/mamba layout.")
final class ConvertCommand implements Callable<Integer> {
    /** Files a model folder's tokenizer consists of; copied along into an official folder. */
    static final String[] TOKENIZER_FILES = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"};

    @Spec CommandSpec spec;
    @Mixin ModelOptions model;

    @Option(names = {"-o", "--output"}, required = true, paramLabel = "PATH",
            description = "The .safetensors file to write (mamba4j format), or the folder to write (official format); written atomically")
    Path output;

    @Option(names = "--format", paramLabel = "mamba4j|official", defaultValue = "mamba4j",
            description = "mamba4j: one checkpoint file (default); official: a state-spaces/mamba folder (MambaLMHeadModel's config.json"
                    + " and tensor names)")
    String format;

    @Override
    public Integer call() {
        String f = format.toLowerCase(Locale.ROOT);
        if (!f.equals("mamba4j") && !f.equals("official"))
            throw new ParameterException(spec.commandLine(), "--format must be mamba4j or official (got '" + format + "')");
        PrintWriter err = spec.commandLine().getErr();
        try (MambaLM lm = model.load(err)) {
            if (f.equals("official")) {
                lm.saveOfficial(output);
                copyTokenizer(model.model, output);
            } else {
                lm.model().save(output);
            }
        }
        spec.commandLine().getOut().println("wrote " + output);
        return 0;
    }

    /** Copies the tokenizer files {@code from} holds into the folder {@code to}, each atomically (shared with finetune). */
    static void copyTokenizer(Path from, Path to) {
        if (from.toAbsolutePath().normalize().equals(to.toAbsolutePath().normalize())) return;
        for (String name : TOKENIZER_FILES) {
            Path src = from.resolve(name);
            if (!Files.isRegularFile(src)) continue;
            try {
                Path tmp = Files.createTempFile(to, name, ".tmp");
                try {
                    Files.copy(src, tmp, StandardCopyOption.REPLACE_EXISTING);
                    Files.move(tmp, to.resolve(name), StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
                } finally {
                    Files.deleteIfExists(tmp);
                }
            } catch (IOException e) {
                throw new UncheckedIOException("cannot copy " + src + " to " + to + ": " + e.getMessage(), e);
            }
        }
    }
}
