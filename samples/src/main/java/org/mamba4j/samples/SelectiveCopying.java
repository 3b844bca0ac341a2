package org.mamba4j.samples;

import java.nio.file.Path;
import java.util.Locale;
import java.util.Random;
import java.util.concurrent.Callable;
import org.mamba4j.AdamW;
import org.mamba4j.Device;
import org.mamba4j.LearningRateSchedule;
import org.mamba4j.LinearHead;
import org.mamba4j.Mamba1Config;
import org.mamba4j.Mamba3Config;
import org.mamba4j.MambaModel;
import org.mamba4j.ModelConfig;
import org.mamba4j.StepResult;
import org.mamba4j.Trainer;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Trains a small Mamba-1 (or, with {@code --arch mamba3}, Mamba-3 SISO) on the <b>selective copying</b> task of the Mamba paper (Gu &amp; Dao 2023, §4.1.1)
 * and saves it.
 *
 * <p><b>Task.</b> Each sequence has a body of {@code --length} positions holding {@code --tokens} data
 * tokens at random positions (in order of appearance) among blank tokens, followed by {@code --tokens}
 * marker tokens. At the i-th marker the model must output the i-th data token. Inputs are one-hot over
 * {@code --symbols} data symbols + blank + marker; the loss is softmax cross-entropy over the data symbols
 * on the answer positions only (every other position carries the ignore index). Because the data
 * positions are random, a time-invariant model (a fixed convolution) cannot solve it: the selection
 * mechanism (input-dependent Δ, B, C) has to decide what to remember. Batches are generated on the fly,
 * so every evaluation is on fresh data.
 *
 * <p><b>Default size, and why.</b> Body 64, 8 data tokens, 8 symbols (T = 72 per sequence, B = 32);
 * a 2-layer d_model 64 Mamba-1 (d_state 16, 67k weights with the head). This is small enough that one training step
 * (forward + backward + AdamW over 2304 positions) takes a few tens of milliseconds on 2 CPU cores, and
 * hard enough to need selection: with 8 tokens spread over 64 positions the model must store and release
 * 8 items in order. With AdamW at 3e-3, warm-up + cosine decay, clipping at 1 and weight decay 0.05 it
 * reaches ≥ 99% token accuracy in about 1200–1300 steps (seeds 1 and 2; ~28 ms per step, ~35 s in all on
 * a 2-core machine), well inside the default budget of 3000 steps (≤ 3 minutes even at 60 ms per step).
 * Training stops early once the accuracy on a fresh evaluation batch reaches {@code --target}.
 * Harder settings train too, just longer: {@code --length 128 --tokens 16 --symbols 16} (the paper's 16
 * tokens and 16 symbols) was at 76% after 2000 steps (~2 minutes).
 *
 * <p>Output: a progress bar on stderr (on a terminal only), a loss/accuracy line every {@code --log-every} steps, then
 * the model ({@code --out}) and its head ({@code <out>.head.safetensors}) are saved, the training curve (loss and
 * accuracy against the step) is drawn into {@code --chart} (a PNG), and the model is loaded back and evaluated with
 * the plain inference API on fresh data; the last line is {@code final accuracy: NN.N%}.
 *
 * <p><b>Mamba-3.</b> {@code --arch mamba3} trains a Mamba-3 SISO backbone of the same width and depth instead: d_state
 * {@code --d-state} (default 16, as the Mamba-1), {@code --headdim} channels per head (default 16, so 8 heads at
 * d_model 64; it must divide 2·d_model), half of the state rotated (4 rotary angles), chunk 64, the official
 * Δ/A initialisation. It needs libmamba's Mamba-3 forward and backward kernels.
 *
 * <p>It trains on a GPU when {@link Device#best()} finds one with a training path, else on the CPU.
 */
@Command(name = "selective-copying", mixinStandardHelpOptions = true, versionProvider = SampleVersion.class,
        description = "Train a small Mamba-1 (or Mamba-3) on the selective copying task and save it.")
public final class SelectiveCopying implements Callable<Integer> {
    @Option(names = "--length", description = "Body length (positions before the markers), default ${DEFAULT-VALUE}.")
    int length = 64;
    @Option(names = "--tokens", description = "Data tokens to copy per sequence, default ${DEFAULT-VALUE}.")
    int tokens = 8;
    @Option(names = "--symbols", description = "Distinct data symbols, default ${DEFAULT-VALUE}.")
    int symbols = 8;
    @CommandLine.Spec CommandLine.Model.CommandSpec spec;  // injected by picocli: usage errors print where the command line prints
    @Option(names = "--arch", paramLabel = "mamba1|mamba3", description = "Architecture of the blocks, default ${DEFAULT-VALUE}.")
    String arch = "mamba1";
    @Option(names = "--d-state", description = "State size (per channel for Mamba-1, per head for Mamba-3), default ${DEFAULT-VALUE}.")
    int dState = 16;
    @Option(names = "--headdim", description = "Mamba-3 only: channels per head, dividing 2 x d_model; default ${DEFAULT-VALUE}.")
    int headdim = 16;
    @Option(names = "--d-model", description = "Model width, default ${DEFAULT-VALUE}.")
    int dModel = 64;
    @Option(names = "--layers", description = "Mamba blocks, default ${DEFAULT-VALUE}.")
    int layers = 2;
    @Option(names = "--batch", description = "Sequences per step, default ${DEFAULT-VALUE}.")
    int batch = 32;
    @Option(names = "--steps", description = "Maximum training steps, default ${DEFAULT-VALUE}.")
    int steps = 3000;
    @Option(names = "--lr", description = "Peak learning rate, default ${DEFAULT-VALUE}.")
    double lr = 3e-3;
    @Option(names = "--target", description = "Stop early at this evaluation accuracy (0..1), default ${DEFAULT-VALUE}.")
    double target = 0.995;
    @Option(names = "--log-every", description = "Steps between evaluation lines, default ${DEFAULT-VALUE}.")
    int logEvery = 100;
    @Option(names = "--threads", description = "CPU threads (default: all cores).")
    int threads = 0;
    @Option(names = "--seed", description = "Seed of the weights and the data, default ${DEFAULT-VALUE}.")
    long seed = 1;
    @Option(names = "--out", description = "Where to save the model, default ${DEFAULT-VALUE}.")
    Path out = Path.of("selective-copying.safetensors");
    @Option(names = "--chart", description = "Where to draw the training curve (PNG; 'none' for no chart), default ${DEFAULT-VALUE}.")
    String chart = "selective-copying.png";

    private int blank, marker, inWidth, seqLen;

    public static void main(String[] args) {
        // JavaCPP logs through SLF4J like the rest (the samples ship slf4j-simple: warnings and errors only)
        if (System.getProperty("org.bytedeco.javacpp.logger") == null) System.setProperty("org.bytedeco.javacpp.logger", "slf4j");
        int code = new CommandLine(new SelectiveCopying()).execute(args);
        if (code != 0) System.exit(code);
    }

    @Override
    public Integer call() throws java.io.IOException {
        if (tokens < 1 || tokens > length) throw new CommandLine.ParameterException(spec.commandLine(),
                "--tokens must be in [1, --length]");
        blank = 0;
        marker = symbols + 1;
        inWidth = symbols + 2;        // one-hot: blank, symbols 1..n, marker
        seqLen = length + tokens;
        Device device = Device.best();
        if (!Trainer.supports(device)) device = Device.cpu();
        ModelConfig config = config();
        String archName = config instanceof Mamba3Config ? "Mamba-3" : "Mamba-1";
        Random data = new Random(seed);
        float[] x = new float[batch * seqLen * inWidth];
        int[] y = new int[batch * seqLen];
        long t0 = System.nanoTime();
        try (MambaModel model = MambaModel.builder(config).inputDim(inWidth).device(device).seed(seed).build();
             Trainer trainer = Trainer.builder(model).batch(batch).seqLen(seqLen)
                     .adamW(AdamW.ofLearningRate(lr).weightDecay(0.05)).clipGradNorm(1.0)
                     .schedule(LearningRateSchedule.warmupCosine(lr, steps / 20, steps, lr / 20))
                     .crossEntropyHead(symbols).headSeed(seed).threads(threads > 0 ? threads : Runtime.getRuntime().availableProcessors())
                     .build()) {
            System.out.printf(Locale.ROOT, "selective copying: body %d, %d tokens of %d symbols; %s d_model %d x %d layers"
                    + " (%,d weights) on %s; batch %d x %d steps%n", length, tokens, symbols, archName, dModel, layers,
                    model.parameterCount() + (long) symbols * (dModel + 1), device.name(), batch, seqLen);
            Progress bar = new Progress(steps);
            TrainingCurve curve = new TrainingCurve(String.format(Locale.ROOT,
                    "Selective copying: %s d_model %d x %d layers, %d tokens in %d positions, %s", archName, dModel, layers, tokens, length,
                    device));
            double lossAvg = Double.NaN, accAvg = Double.NaN;
            int step = 0;
            for (step = 1; step <= steps; step++) {
                fill(data, x, y);
                StepResult r = trainer.stepCrossEntropy(x, y);
                lossAvg = Double.isNaN(lossAvg) ? r.loss() : 0.95 * lossAvg + 0.05 * r.loss();
                accAvg = Double.isNaN(accAvg) ? r.accuracy() : 0.95 * accAvg + 0.05 * r.accuracy();
                curve.train(step, lossAvg, accAvg);
                bar.update(step, String.format(Locale.ROOT, "loss %.4f acc %5.1f%%", lossAvg, 100 * accAvg));
                if (step % logEvery == 0 || step == steps) {
                    fill(data, x, y);
                    StepResult e = trainer.evaluateCrossEntropy(x, y);
                    curve.eval(step, e.loss(), e.accuracy());
                    bar.clear();
                    System.out.printf(Locale.ROOT, "step %5d  train loss %.4f  eval loss %.4f  eval accuracy %5.1f%%  lr %.2e  %.1fs%n",
                            step, lossAvg, e.loss(), 100 * e.accuracy(), r.learningRate(), (System.nanoTime() - t0) / 1e9);
                    if (e.accuracy() >= target) break;
                }
            }
            bar.clear();
            double trainSeconds = (System.nanoTime() - t0) / 1e9;
            Path headFile = headPath(out);
            java.nio.file.Files.createDirectories(out.toAbsolutePath().getParent());
            model.save(out);
            trainer.head().save(headFile);
            System.out.printf(Locale.ROOT, "trained %d steps in %.1fs (%.1f ms/step); saved %s and %s%n", Math.min(step, steps),
                    trainSeconds, 1e3 * trainSeconds / Math.min(step, steps), out, headFile);
            if (!chart.equals("none")) {
                curve.writePng(Path.of(chart));
                System.out.printf(Locale.ROOT, "training curve: %s%n", chart);
            }
        }
        // Load both files back and measure with the inference API on fresh data.
        double accuracy;
        try (MambaModel model = MambaModel.load(out)) {
            accuracy = evaluate(model, LinearHead.load(headPath(out)), new Random(seed ^ 0x5eed), 8);
        }
        System.out.printf(Locale.ROOT, "final accuracy: %.1f%%%n", 100 * accuracy);
        return 0;
    }

    /**
     * The backbone's configuration for {@code --arch}: the Mamba-1 of the defaults above, or a Mamba-3 SISO of the same
     * width, depth and state size with {@code --headdim} channels per head.
     */
    ModelConfig config() {
        CommandLine cli = spec != null ? spec.commandLine() : new CommandLine(this);
        try {
            switch (arch.toLowerCase(Locale.ROOT)) {
                case "mamba1":
                    return Mamba1Config.builder().dModel(dModel).layers(layers).dState(dState).build();
                case "mamba3":
                    if (headdim < 1 || (2L * dModel) % headdim != 0)
                        throw new CommandLine.ParameterException(cli, "--headdim " + headdim + " must divide 2 x --d-model = " + 2L * dModel);
                    return Mamba3Config.builder().dModel(dModel).layers(layers).dState(dState).headdim(headdim).build();
                default:
                    throw new CommandLine.ParameterException(cli, "--arch must be mamba1 or mamba3 (got '" + arch + "')");
            }
        } catch (org.mamba4j.InvalidConfigException e) {
            throw new CommandLine.ParameterException(cli, e.getMessage());
        }
    }

    /** Token accuracy on the answer positions of `batches` fresh batches, via MambaModel.forward + the head. */
    private double evaluate(MambaModel model, LinearHead head, Random rng, int batches) {
        float[] x = new float[batch * seqLen * inWidth];
        int[] y = new int[batch * seqLen];
        long correct = 0, total = 0;
        for (int i = 0; i < batches; i++) {
            fill(rng, x, y);
            float[] out = model.forward(x, batch, seqLen);
            // Only the answer positions: gather their outputs, then one head product.
            float[] answers = new float[batch * tokens * dModel];
            for (int b = 0; b < batch; b++)
                System.arraycopy(out, (b * seqLen + length) * dModel, answers, b * tokens * dModel, tokens * dModel);
            int[] predicted = head.argmax(answers);
            for (int b = 0; b < batch; b++)
                for (int k = 0; k < tokens; k++) {
                    if (predicted[b * tokens + k] == y[b * seqLen + length + k]) correct++;
                    total++;
                }
        }
        return (double) correct / total;
    }

    /** One batch: inputs one-hot [batch, seqLen, inWidth], targets (symbol index or ignore) [batch, seqLen]. */
    private void fill(Random rng, float[] x, int[] y) {
        java.util.Arrays.fill(x, 0f);
        java.util.Arrays.fill(y, Trainer.DEFAULT_IGNORE_INDEX);
        int[] pos = new int[tokens];
        for (int b = 0; b < batch; b++) {
            // tokens distinct positions in [0, length), ascending (a partial Fisher-Yates, then sort)
            int[] all = new int[length];
            for (int i = 0; i < length; i++) all[i] = i;
            for (int i = 0; i < tokens; i++) {
                int j = i + rng.nextInt(length - i);
                int tmp = all[i];
                all[i] = all[j];
                all[j] = tmp;
                pos[i] = all[i];
            }
            java.util.Arrays.sort(pos);
            int row = b * seqLen;
            for (int t = 0; t < length; t++) x[(row + t) * inWidth + blank] = 1f;
            for (int k = 0; k < tokens; k++) {
                int symbol = rng.nextInt(symbols);          // 0..symbols-1, input token symbol+1
                int at = row + pos[k];
                x[at * inWidth + blank] = 0f;
                x[at * inWidth + 1 + symbol] = 1f;
                x[(row + length + k) * inWidth + marker] = 1f;
                y[row + length + k] = symbol;
            }
        }
    }

    private static Path headPath(Path model) {
        String name = model.getFileName().toString();
        String base = name.endsWith(".safetensors") ? name.substring(0, name.length() - ".safetensors".length()) : name;
        return model.resolveSibling(base + ".head.safetensors");
    }

    /**
     * A one-line progress bar on stderr, redrawn at most 10 times a second — only on a terminal: redirected or piped
     * output gets no carriage returns or escape sequences (the evaluation lines on stdout show the progress).
     */
    private static final class Progress {
        private final boolean enabled = Terminal.stderrIsInteractive();
        private final int total;
        private final long start = System.nanoTime();
        private long lastDraw;
        private boolean drawn;

        Progress(int total) {
            this.total = total;
        }

        void update(int done, String status) {
            if (!enabled) return;
            long now = System.nanoTime();
            if (now - lastDraw < 100_000_000L && done != total) return;
            lastDraw = now;
            int width = 30, filled = (int) ((long) width * done / total);
            double secs = (now - start) / 1e9;
            System.err.printf(Locale.ROOT, "\r[%s%s] %5d/%d  %s  %.1fs ", "#".repeat(filled), "-".repeat(width - filled),
                    done, total, status, secs);
            System.err.flush();
            drawn = true;
        }

        void clear() {
            if (drawn) {
                System.err.print("\r\033[K");
                System.err.flush();
                drawn = false;
            }
        }
    }
}
