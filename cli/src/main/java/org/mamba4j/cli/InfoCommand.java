package org.mamba4j.cli;

import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.Callable;
import org.mamba4j.Mamba3Config;
import org.mamba4j.MambaModel;
import org.mamba4j.lm.HfMambaConfig;
import org.mamba4j.lm.Mamba3LMConfig;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Spec;

/** {@code mamba4j info}: what a model folder holds (architecture, sizes, parameters), without loading the weights. */
@Command(name = "info", mixinStandardHelpOptions = true, versionProvider = Version.class, description = "Describe a model folder (reads config.json only).")
final class InfoCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Option(names = {"-m", "--model"}, required = true, paramLabel = "DIR",
            description = "Model folder: Mamba-1 (HuggingFace or state-spaces layout) or Mamba-3 (state-spaces layout)")
    Path model;

    @Override
    public Integer call() {
        ModelFolder.require(model);
        PrintWriter out = spec.commandLine().getOut();
        if (Mamba3LMConfig.isMamba3(model)) {
            describe(out, Mamba3LMConfig.read(model));
        } else {
            describe(out, HfMambaConfig.read(model));
        }
        out.printf("tokenizer:    %s%n", Files.isRegularFile(model.resolve("tokenizer.json")) ? "tokenizer.json" : "none");
        return 0;
    }

    private void describe(PrintWriter out, HfMambaConfig c) {
        long D = c.dModel(), E = c.dInner(), N = c.dState(), R = c.dtRank(), K = c.dConv();
        // norm + in_proj + conv (w, b) + x_proj + dt_proj (w, b) + A_log + D + out_proj
        long perLayer = D + 2 * E * D + E * K + E + (R + 2 * N) * E + E * R + E + E * N + E + D * E;
        long params = perLayer * c.nLayers() + (long) c.paddedVocab() * c.dModel() * (c.tieEmbeddings() ? 1 : 2) + c.dModel();
        out.printf("model:        Mamba-1 (%s)%n", model);
        out.printf("architecture: mamba1%n");
        out.printf("d_model:      %d%n", c.dModel());
        out.printf("layers:       %d%n", c.nLayers());
        out.printf("d_inner:      %d (expand %d)%n", c.dInner(), c.expand());
        out.printf("d_state:      %d%n", c.dState());
        out.printf("d_conv:       %d%n", c.dConv());
        out.printf("dt_rank:      %d%n", c.dtRank());
        out.printf("vocab:        %d (padded to %d)%n", c.vocabSize(), c.paddedVocab());
        out.printf("tied head:    %s%n", c.tieEmbeddings());
        out.printf("norm eps:     %s%n", c.normEps());
        printParams(out, params);
    }

    private void describe(PrintWriter out, Mamba3LMConfig lm) {
        Mamba3Config c = lm.config();
        // exact, from libmamba's layout, without allocating the model
        long params = 0;
        for (long[] shape : MambaModel.builder(c).vocabSize(lm.paddedVocab()).tieEmbeddings(lm.tieEmbeddings()).parameterShapes().values()) {
            long n = 1;
            for (long s : shape) n *= s;
            params += n;
        }
        out.printf("model:        Mamba-3 SISO (%s)%n", model);
        out.printf("architecture: mamba3%n");
        out.printf("d_model:      %d%n", c.dModel());
        out.printf("layers:       %d%n", c.layers());
        out.printf("d_inner:      %d (expand %d)%n", c.dInner(), c.expand());
        out.printf("d_state:      %d%n", c.dState());
        out.printf("heads:        %d x headdim %d, %d B/C group(s)%n", c.nheads(), c.headdim(), c.ngroups());
        out.printf("rope:         %d angles (rope_fraction %s)%n", c.ropeAngles(), c.ropeFraction());
        out.printf("A_floor:      %s%n", c.aFloor());
        out.printf("chunk size:   %d%n", c.chunkSize());
        out.printf("gate norm:    %s%n", c.outprojNorm());
        out.printf("in_proj:      %d wide%n", c.inProjWidth());
        out.printf("vocab:        %d (padded to %d)%n", lm.vocabSize(), lm.paddedVocab());
        out.printf("tied head:    %s%n", lm.tieEmbeddings());
        out.printf("norm eps:     %s%n", c.normEps());
        printParams(out, params);
    }

    private static void printParams(PrintWriter out, long params) {
        out.printf("parameters:   %,d (%.1f MB as f32, %.1f MB as bf16)%n", params, params * 4 / 1e6, params * 2 / 1e6);
    }
}
