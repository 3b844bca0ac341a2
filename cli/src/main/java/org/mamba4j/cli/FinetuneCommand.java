package org.mamba4j.cli;

import java.io.IOException;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Comparator;
import java.util.Random;
import java.util.concurrent.Callable;
import java.util.stream.Stream;
import org.mamba4j.AdamW;
import org.mamba4j.Mamba1Config;
import org.mamba4j.Mamba3Config;
import org.mamba4j.StepResult;
import org.mamba4j.Trainer;
import org.mamba4j.lm.MambaLM;
import org.mamba4j.lm.Tokenizer;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;
import picocli.CommandLine.Model.CommandSpec;

/**
 * {@code mamba4j finetune}: trains a model folder on a text file (next-token cross-entropy, AdamW) and writes the
 * result as a new folder, tokenizer files copied along: a Mamba-1 model in the HuggingFace transformers layout
 * ({@link MambaLM#savePretrained}: {@code MambaForCausalLM.from_pretrained} loads it), a Mamba-3 model in the official
 * state-spaces/mamba layout ({@link MambaLM#saveOfficial}; transformers has no Mamba-3 class).
 *
 * <p>The text is tokenized whole with the folder's tokenizer and cut into windows of {@code --seq-len + 1} tokens
 * (ids = the first T, targets = the last T): consecutive windows start T tokens apart, so every next-token pair of
 * the text is in exactly one window, plus one window ending at the last token when T does not divide the text. Each
 * pass over the windows visits them in an order drawn from {@code --seed}; a step takes the next B windows, starting
 * a new pass (a new order) when one runs out, so short data wraps around.
 */
@Command(name = "finetune", mixinStandardHelpOptions = true, versionProvider = Version.class,
        description = {"Fine-tune a model folder on a text file (next-token cross-entropy, AdamW) and write the result as a new"
                + " folder, loadable by every command and by MambaLM.fromPretrained.",
                "The output (config.json + model.safetensors, tokenizer files copied along) is a HuggingFace transformers folder"
                        + " for a Mamba-1 model (MambaForCausalLM.from_pretrained loads it) and an official state-spaces/mamba"
                        + " folder for a Mamba-3 model (transformers has no Mamba-3 class)."})
final class FinetuneCommand implements Callable<Integer> {
    @Spec CommandSpec spec;
    @Mixin ModelOptions model;

    @Option(names = "--data", required = true, paramLabel = "FILE", description = "The training text (UTF-8), tokenized whole")
    Path data;

    @Option(names = {"-o", "--output"}, required = true, paramLabel = "DIR",
            description = "The folder to write (must not exist, or be empty); written in full or not at all")
    Path output;

    @Option(names = "--steps", required = true, paramLabel = "N", description = "Optimizer steps")
    int steps;

    @Option(names = "--batch", defaultValue = "8", paramLabel = "B", description = "Windows per step (default: ${DEFAULT-VALUE})")
    int batch;

    @Option(names = "--seq-len", defaultValue = "256", paramLabel = "T", description = "Tokens per window (default: ${DEFAULT-VALUE})")
    int seqLen;

    @Option(names = "--lr", defaultValue = "1e-4", paramLabel = "LR", description = "AdamW learning rate (default: ${DEFAULT-VALUE})")
    double lr;

    @Option(names = "--weight-decay", defaultValue = "0.1", paramLabel = "WD",
            description = "AdamW weight decay; never on norms, biases, A_log, D or the embedding (default: ${DEFAULT-VALUE})")
    double weightDecay;

    @Option(names = "--clip", defaultValue = "1.0", paramLabel = "NORM",
            description = "Clip the global gradient norm to NORM; 0 = off (default: ${DEFAULT-VALUE})")
    double clip;

    @Option(names = "--curve", defaultValue = "training-curve.png", paramLabel = "NAME",
            description = "The training curve (loss and next-token accuracy per step), a PNG written into the output folder;"
                    + " \"none\" skips it (default: ${DEFAULT-VALUE})")
    String curve;

    @Option(names = "--seed", defaultValue = "0", paramLabel = "N", description = "Order of the windows: same seed, same run (default: ${DEFAULT-VALUE})")
    long seed;

    @Override
    public Integer call() {
        checkArguments();
        PrintWriter out = spec.commandLine().getOut(), err = spec.commandLine().getErr();
        if (!Files.isRegularFile(data)) throw new IllegalArgumentException("data file not found: " + data);
        Path target = output.toAbsolutePath().normalize();
        requireFreeOutput(target);
        ModelFolder.require(model.model);
        Path tokenizerJson = model.model.resolve("tokenizer.json");
        if (!Files.isRegularFile(tokenizerJson))
            throw new IllegalArgumentException("no tokenizer.json in " + model.model + ": finetune needs it to tokenize the data");
        int[] tokens;
        try (Tokenizer tokenizer = Tokenizer.fromFile(tokenizerJson)) {
            tokens = tokenizer.encode(readText(data));
        }
        if (tokens.length < seqLen + 1)
            throw new IllegalArgumentException("the data is too short: " + data + " holds " + tokens.length + " tokens, a window needs"
                    + " --seq-len + 1 = " + (seqLen + 1) + " (use a smaller --seq-len or more text)");
        Windows windows = new Windows(tokens, seqLen, seed);

        try (MambaLM lm = model.load(err)) {
            for (int t : tokens)
                if (t >= lm.vocabSize())
                    throw new IllegalArgumentException("the tokenizer produced id " + t + ", outside the model's vocabulary of "
                            + lm.vocabSize() + ": tokenizer.json does not belong to this model");
            if (lm.model().config() instanceof Mamba3Config c) requireOfficialNormEps(c);
            if (!Trainer.supports(lm.model().device()))
                throw new IllegalArgumentException("this build cannot train on " + lm.model().device());
            int[] ids = new int[batch * seqLen], targets = new int[batch * seqLen];
            double first = Double.NaN, last = Double.NaN;
            LossCurve lossCurve = new LossCurve("finetune " + model.model.getFileName() + " (B " + batch + " x T " + seqLen
                    + ", lr " + lr + ")", steps);
            long start = System.nanoTime();
            try (Trainer trainer = Trainer.builder(lm.model()).batch(batch).seqLen(seqLen)
                    .adamW(AdamW.ofLearningRate(lr).weightDecay(weightDecay)).clipGradNorm(clip).build()) {
                TrainingProgress progress = new TrainingProgress(err, steps);
                for (int s = 1; s <= steps; s++) {
                    windows.fill(ids, targets, batch);
                    StepResult r = trainer.stepTokens(ids, targets);
                    if (s == 1) first = r.loss();
                    last = r.loss();
                    if (!Double.isFinite(last)) {
                        progress.finish();
                        throw new IllegalStateException("the loss is " + last + " at step " + s + ": lower --lr (nothing was written)");
                    }
                    lossCurve.add(s, last, r.accuracy());
                    progress.update(s, last, (long) s * batch * seqLen);
                }
                progress.finish();
            }
            double secs = (System.nanoTime() - start) / 1e9;
            long trained = (long) steps * batch * seqLen;
            write(lm, target, lossCurve);
            out.printf("fine-tuned %s: %d steps of %d x %d tokens (%,d tokens of data in %d windows, seed %d)%n",
                    model.model.getFileName(), steps, batch, seqLen, tokens.length, windows.count(), seed);
            out.printf("loss:  %.4f (first step) -> %.4f (last step)%n", first, last);
            out.printf("speed: %,.0f tokens/s (%,d tokens in %.1f s on %s, %s)%n", trained / Math.max(secs, 1e-9), trained, secs,
                    lm.model().device(), lm.model().dtype());
            out.printf("wrote %s (official state-spaces layout)%s%n", output,
                    writesCurve() ? ", training curve " + output.resolve(curve) : "");
        }
        return 0;
    }

    private void checkArguments() {
        if (steps <= 0) throw usage("--steps must be > 0 (got " + steps + ")");
        if (batch <= 0) throw usage("--batch must be > 0 (got " + batch + ")");
        if (seqLen <= 0) throw usage("--seq-len must be > 0 (got " + seqLen + ")");
        if (!(lr > 0) || Double.isInfinite(lr)) throw usage("--lr must be > 0 (got " + lr + ")");
        if (!(weightDecay >= 0) || Double.isInfinite(weightDecay)) throw usage("--weight-decay must be >= 0 (got " + weightDecay + ")");
        if (!(clip >= 0) || Double.isInfinite(clip)) throw usage("--clip must be >= 0 (got " + clip + ")");
        if ((long) batch * seqLen > Integer.MAX_VALUE) throw usage("--batch x --seq-len is too large");
        if (writesCurve() && (!curve.endsWith(".png") || curve.contains("/") || curve.contains("\\") || curve.startsWith(".")))
            throw usage("--curve must be a file name ending in .png (it is written into the output folder) or none (got " + curve + ")");
        model.device();
        model.dtype();
    }

    private boolean writesCurve() {
        return !"none".equals(curve);
    }

    private ParameterException usage(String message) {
        return new ParameterException(spec.commandLine(), message);
    }

    private static String readText(Path file) {
        try {
            return StandardCharsets.UTF_8.newDecoder().decode(java.nio.ByteBuffer.wrap(Files.readAllBytes(file))).toString();
        } catch (CharacterCodingException e) {
            throw new IllegalArgumentException("the data file is not UTF-8 text: " + file);
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read " + file + ": " + e.getMessage(), e);
        }
    }

    /** The output must be new (or an empty folder): finetune never mixes its files with others, nor overwrites a model. */
    private static void requireFreeOutput(Path target) {
        if (!Files.exists(target)) return;
        boolean empty = false;
        if (Files.isDirectory(target)) {
            try (Stream<Path> s = Files.list(target)) {
                empty = s.findAny().isEmpty();
            } catch (IOException e) {
                throw new UncheckedIOException("cannot read " + target + ": " + e.getMessage(), e);
            }
        }
        if (!empty) throw new IllegalArgumentException("the output exists and is not an empty folder: " + target + " (choose a new --output)");
    }

    /** The official config.json (Mamba-3's output) has no field for the norm epsilon: checked before training. */
    private static void requireOfficialNormEps(Mamba3Config config) {
        if (config.normEps() != 1e-5f)
            throw new IllegalArgumentException("the model's norm epsilon is " + config.normEps() + ": the official layout finetune"
                    + " writes for Mamba-3 fixes it to 1e-5 (save from Java with MambaModel.save instead)");
    }

    /** Writes the folder next to {@code target} under a temporary name, then renames it into place. */
    private void write(MambaLM lm, Path target, LossCurve lossCurve) {
        Path parent = target.getParent();
        Path tmp;
        try {
            Files.createDirectories(parent);
            tmp = createHiddenSibling(target);
        } catch (IOException e) {
            throw new UncheckedIOException("cannot create a folder in " + parent + ": " + e.getMessage(), e);
        }
        try {
            if (lm.model().config() instanceof Mamba1Config) lm.savePretrained(tmp);
            else lm.saveOfficial(tmp);
            ConvertCommand.copyTokenizer(model.model, tmp);
            if (writesCurve()) lossCurve.writePng(tmp.resolve(curve));
            requireFreeOutput(target);
            try {
                Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE);  // rename(2): replaces an empty folder
            } catch (AtomicMoveNotSupportedException e) {
                Files.move(tmp, target);
            }
        } catch (IOException e) {
            throw new UncheckedIOException("cannot write " + target + ": " + e.getMessage(), e);
        } finally {
            deleteRecursively(tmp);
        }
    }

    /** A new folder next to {@code target}; unlike createTempDirectory it gets the umask's permissions, as the result should. */
    private static Path createHiddenSibling(Path target) throws IOException {
        Random random = new Random();
        for (int attempt = 0; ; attempt++) {
            Path dir = target.resolveSibling("." + target.getFileName() + ".tmp-" + Integer.toUnsignedString(random.nextInt(), 36));
            try {
                return Files.createDirectory(dir);
            } catch (java.nio.file.FileAlreadyExistsException e) {
                if (attempt == 100) throw e;
            }
        }
    }

    private static void deleteRecursively(Path dir) {
        if (!Files.exists(dir)) return;
        try (Stream<Path> s = Files.walk(dir)) {
            s.sorted(Comparator.reverseOrder()).forEach(p -> {
                try {
                    Files.deleteIfExists(p);
                } catch (IOException ignored) {
                    // best effort: a leftover hidden temporary folder
                }
            });
        } catch (IOException ignored) {
            // best effort
        }
    }

    /** The training windows of a token sequence and the seeded order they are visited in. */
    static final class Windows {
        private final int[] tokens;
        private final int seqLen;
        private final int[] starts;
        private final Random rng;
        private int next;

        Windows(int[] tokens, int seqLen, long seed) {
            if (tokens.length < seqLen + 1) throw new IllegalArgumentException(tokens.length + " tokens < seqLen + 1 = " + (seqLen + 1));
            this.tokens = tokens;
            this.seqLen = seqLen;
            int full = (tokens.length - 1) / seqLen;
            boolean tail = (tokens.length - 1) % seqLen != 0;
            starts = new int[full + (tail ? 1 : 0)];
            for (int k = 0; k < full; k++) starts[k] = k * seqLen;
            if (tail) starts[full] = tokens.length - 1 - seqLen;
            rng = new Random(seed);
            shuffle();
        }

        int count() {
            return starts.length;
        }

        /** The start of the next window, beginning a new pass in a new order when this one is done. */
        int nextStart() {
            if (next == starts.length) shuffle();
            return starts[next++];
        }

        /** Fills ids/targets [rows, seqLen] with the next {@code rows} windows. */
        void fill(int[] ids, int[] targets, int rows) {
            for (int b = 0; b < rows; b++) {
                int s = nextStart();
                System.arraycopy(tokens, s, ids, b * seqLen, seqLen);
                System.arraycopy(tokens, s + 1, targets, b * seqLen, seqLen);
            }
        }

        private void shuffle() {
            for (int i = starts.length - 1; i > 0; i--) {
                int j = rng.nextInt(i + 1);
                int t = starts[i];
                starts[i] = starts[j];
                starts[j] = t;
            }
            next = 0;
        }
    }
}
