package org.mamba4j.cli;

import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.concurrent.Callable;
import org.mamba4j.lm.MambaLM;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;
import picocli.CommandLine.Model.CommandSpec;

/** {@code mamba4j convert}: HuggingFace folder → one mamba4j safetensors checkpoint (f32, config in metadata). */
@Command(name = "convert", mixinStandardHelpOptions = true, versionProvider = Version.class,
        description = "Convert a HuggingFace Mamba folder into a single mamba4j checkpoint (loadable with MambaModel.load).")
final class ConvertCommand implements Callable<Integer> {
    @Spec CommandSpec spec;
    @Mixin ModelOptions model;

    @Option(names = {"-o", "--output"}, required = true, paramLabel = "FILE", description = "The .safetensors file to write (atomically)")
    Path output;

    @Override
    public Integer call() {
        PrintWriter err = spec.commandLine().getErr();
        try (MambaLM lm = model.load(err)) {
            lm.model().save(output);
        }
        spec.commandLine().getOut().println("wrote " + output);
        return 0;
    }
}
