package org.mamba4j.cli;

import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.Locale;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.lm.MambaLM;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;
import picocli.CommandLine.Model.CommandSpec;

/** The options shared by commands that load a model: folder, device and weight type. */
final class ModelOptions {
    @Spec(Spec.Target.MIXEE)
    CommandSpec spec;

    @Option(names = {"-m", "--model"}, required = true, paramLabel = "DIR",
            description = "Model folder: config.json, model.safetensors (or a sharded index), tokenizer.json; Mamba-1 (HuggingFace"
                    + " or state-spaces layout) or Mamba-3 (state-spaces layout)")
    Path model;

    @Option(names = "--device", paramLabel = "cpu|cuda[:N]", defaultValue = "cpu",
            description = "Where to run (default: ${DEFAULT-VALUE}); 'best' picks the first GPU if there is one")
    String device;

    @Option(names = "--dtype", paramLabel = "f32|tf32|bf16|f16", defaultValue = "f32",
            description = "Weight storage on the device (default: ${DEFAULT-VALUE}); bf16/f16 halve the weights' memory"
                    + " (and, on the CPU, about halve a decode step's time)")
    String dtype;

    Device device() {
        String d = device.toLowerCase(Locale.ROOT);
        if (d.equals("cpu")) return Device.cpu();
        if (d.equals("best")) return Device.best();
        if (d.equals("cuda")) return Device.cuda(0);
        if (d.startsWith("cuda:")) {
            try {
                return Device.cuda(Integer.parseInt(d.substring(5)));
            } catch (NumberFormatException e) {
                // fall through to the usage error
            }
        }
        throw new ParameterException(spec.commandLine(), "--device must be cpu, best, cuda or cuda:N (got '" + device + "')");
    }

    DType dtype() {
        try {
            return DType.valueOf(dtype.toUpperCase(Locale.ROOT));
        } catch (IllegalArgumentException e) {
            throw new ParameterException(spec.commandLine(), "--dtype must be f32, tf32, bf16 or f16 (got '" + dtype + "')");
        }
    }

    /** Loads the model with a progress bar on stderr. */
    MambaLM load(PrintWriter err) {
        Device device = device();
        DType dtype = dtype();
        ModelFolder.require(model);
        ProgressBar bar = new ProgressBar(err, "loading " + model.getFileName());
        MambaLM lm = MambaLM.fromPretrained(model, device, dtype, (tensor, done, total) -> bar.update(done, total));
        bar.finish();
        return lm;
    }
}
