package org.mamba4j.cli;

import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.Callable;
import org.mamba4j.lm.HfMambaConfig;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Spec;

/** {@code mamba4j info}: what a model folder holds, without loading the weights. */
@Command(name = "info", mixinStandardHelpOptions = true, versionProvider = Version.class, description = "Describe a model folder (reads config.json only).")
final class InfoCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Option(names = {"-m", "--model"}, required = true, paramLabel = "DIR", description = "HuggingFace Mamba folder")
    Path model;

    @Override
    public Integer call() {
        HfMambaConfig c = HfMambaConfig.read(ModelFolder.require(model));
        PrintWriter out = spec.commandLine().getOut();
        long D = c.dModel(), E = c.dInner(), N = c.dState(), R = c.dtRank(), K = c.dConv();
        // norm + in_proj + conv (w, b) + x_proj + dt_proj (w, b) + A_log + D + out_proj
        long perLayer = D + 2 * E * D + E * K + E + (R + 2 * N) * E + E * R + E + E * N + E + D * E;
        long params = perLayer * c.nLayers() + (long) c.paddedVocab() * c.dModel() * (c.tieEmbeddings() ? 1 : 2) + c.dModel();
        out.printf("model:        Mamba-1 (%s)%n", model);
        out.printf("d_model:      %d%n", c.dModel());
        out.printf("layers:       %d%n", c.nLayers());
        out.printf("d_inner:      %d (expand %d)%n", c.dInner(), c.expand());
        out.printf("d_state:      %d%n", c.dState());
        out.printf("d_conv:       %d%n", c.dConv());
        out.printf("dt_rank:      %d%n", c.dtRank());
        out.printf("vocab:        %d (padded to %d)%n", c.vocabSize(), c.paddedVocab());
        out.printf("tied head:    %s%n", c.tieEmbeddings());
        out.printf("norm eps:     %s%n", c.normEps());
        out.printf("parameters:   %,d (%.1f MB as f32, %.1f MB as bf16)%n", params, params * 4 / 1e6, params * 2 / 1e6);
        out.printf("tokenizer:    %s%n", Files.isRegularFile(model.resolve("tokenizer.json")) ? "tokenizer.json" : "none");
        return 0;
    }
}
