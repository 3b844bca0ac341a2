package org.mamba4j;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.function.Predicate;
import org.bytedeco.javacpp.FloatPointer;
import org.mamba4j.nativ.AdamWConfig;
import org.mamba4j.nativ.StepStats;
import org.mamba4j.nativ.global.libmamba;

/**
 * Trains a {@link MambaModel} with backpropagation through time and AdamW.
 *
 * <pre>{@code
 * try (Trainer t = Trainer.builder(model).batch(16).seqLen(64)
 *         .adamW(AdamW.ofLearningRate(1e-3).weightDecay(0.01)).clipGradNorm(1.0).build()) {
 *     StepResult r = t.step(inputs, dOutput);              // fused: forward + backward + AdamW
 *     float[] y = t.forward(inputs);                       // split: any loss computed in Java …
 *     t.backward(MseLoss.compute(y, targets).gradient()); // … then backward + clip + AdamW
 * }
 * }</pre>
 *
 * <p><b>Weights.</b> The trainer updates the model's own parameters in place: after an optimizer step the
 * model's {@code forward}/{@code step} calls see the new weights. {@link #snapshot()} copies them into a
 * separate model (e.g. a frozen target network). Do not change the model's parameters between a
 * {@link #forward} and its {@link #backward}.
 *
 * <p><b>Shapes.</b> Every call works on one batch of {@link #batch()} sequences of {@link #seqLen()} steps:
 * inputs {@code [B, T, inputWidth]}, outputs, output gradients and MSE targets {@code [B, T, outputWidth]} (dModel, or
 * the width of an {@link Builder#outputHead}), cross-entropy targets {@code [B, T]}, all row-major.
 * Each sequence starts from a zero recurrent state unless {@link #burnIn} or {@link #startFrom} prepared
 * one for the next forward; the start state receives no gradient (truncated BPTT) unless
 * {@link #setStateGradients} asks for it.
 *
 * <p><b>Long streams, window by window.</b> {@link #startFrom} the end state of the previous window
 * ({@link #readEndState}) carries the state across windows; {@link #setStateGradients} exposes the start state's
 * gradient ({@link #readStartStateGradient}), and {@link #setEndStateGradient} feeds the next window's start-state
 * gradient back into a window's backward, so the gradients of a whole stream can be computed exactly as one
 * backward through time over all windows, or truncated at any window boundary.
 *
 * <p><b>Gradients.</b> Backward calls add to the accumulated gradient; an optimizer step clips the whole
 * gradient vector to {@link Builder#clipGradNorm} (reporting the pre-clip norm), runs AdamW and clears it.
 * Scale conventions for accumulation: see {@link BackwardOptions}.
 *
 * <p><b>Losses.</b> Any loss computed in Java goes through {@link #forward} + {@link #backward}; MSE also
 * exists fused ({@link #stepMse}), and softmax cross-entropy over a learnable linear head
 * ({@link Builder#crossEntropyHead}) is fused natively ({@link #stepCrossEntropy}): logits never leave
 * native memory. The head is trained by the same AdamW and read back with {@link #head()}.
 *
 * <p><b>Output head.</b> {@link Builder#outputHead outputHead(width)} adds a learnable linear layer [width, dModel] +
 * bias after the final norm; outputs, output gradients and MSE targets are then [B, T, width] (width 1: a scalar
 * target per position). {@link #head()} / {@link #loadHead} save and restore it like the cross-entropy head.
 *
 * <p><b>Loss scaling.</b> {@link Builder#lossScaler} scales every backward's output gradient by a dynamic loss scale
 * and unscales inside AdamW ({@link LossScaler}: GradScaler semantics); a step with a non-finite gradient is skipped
 * and the scale backs off.
 *
 * <p><b>Reinforcement learning.</b> A target network's forward needs no tape: use {@link #targetForward}
 * (the model's inference forward) or a {@link #snapshot()} updated every N steps.
 *
 * <p><b>Determinism.</b> Results are bit-identical from run to run and for any thread count: batch rows and
 * channel blocks are split over threads, and every reduction across them runs in a fixed order. On a CUDA
 * device they are bit-identical from run to run on the same GPU model (no atomics; fixed-order reductions);
 * CPU and GPU agree to f32 rounding, not bit for bit.
 *
 * <p><b>Threads and lifetime.</b> Calls are serialised with the model's own calls, so inference on the model
 * from another thread sees the weights before or after an optimizer step, never half of one; trainers of
 * different models run concurrently without affecting each other's bits. The model must stay
 * open while the trainer is used; every call after {@link #close()} (of either) throws
 * {@link IllegalStateException}. Closing is idempotent and thread-safe.
 *
 * <p><b>Errors.</b> Wrong shapes and out-of-range values (a cross-entropy target outside the head's vocabulary)
 * throw {@link IllegalArgumentException}; calls out of order (a {@link #backward} without its {@link #forward},
 * {@link #inputGradient} before any backward, {@link #readEndState} before any forward) throw
 * {@link IllegalStateException}.
 *
 * <p><b>Language models.</b> A model built with {@code vocabSize(V)} (Mamba-1 or Mamba-3, tied or untied head)
 * trains on token ids with {@link #stepTokens}: ids {@code [B, T]} in, next-token targets {@code [B, T]} (the ids
 * shifted by one; {@link Builder#ignoreIndex} marks padding), softmax cross-entropy over the model's own
 * {@code lm_head}, and gradients into every tensor including the token embedding (a tied embedding receives the
 * sum of both uses). The logits are computed natively in blocks of rows, never all at once. For a loss computed in
 * Java, {@link #forwardTokens} returns the logits and {@link #backwardLogits} takes their gradient. The float-input calls
 * ({@link #forward}, {@link #backward}, {@link #step}, {@link #stepMse}, {@link #stepCrossEntropy},
 * {@link #burnIn}, {@link #inputGradient}) and {@link Builder#crossEntropyHead} throw
 * {@link IllegalStateException} for a language model. By default the embedding gets no weight decay (as
 * {@code nn.Embedding} in the official recipes); an untied {@code lm_head.weight} does.
 *
 * <pre>{@code
 * try (MambaModel lm = MambaModel.builder(config).vocabSize(vocab).seed(1).build();
 *      Trainer t = Trainer.builder(lm).batch(8).seqLen(128).adamW(AdamW.ofLearningRate(1e-3)).clipGradNorm(1.0).build()) {
 *     // ids[b, t] = tokens[b][t], targets[b, t] = tokens[b][t + 1] (or DEFAULT_IGNORE_INDEX past the end)
 *     StepResult r = t.stepTokens(ids, targets);
 *     System.out.println(r);                                  // loss, accuracy, gradient norm
 *     lm.save(Path.of("finetuned.mamba"));                    // the trained weights
 * }
 * }</pre>
 *
 * <p><b>Devices.</b> Training runs where the model lives: on the CPU or on a CUDA device (see
 * {@link #supports(Device)}), in every {@link DType}. BF16/F16 models train with f32 master weights, which exist
 * only while the trainer does (AdamW updates them): the forward's products use the 2-byte copy, the backward runs
 * in f32 on the master weights, and the copy is refreshed after every optimizer step. TF32 models train their f32
 * storage in place, as F32 ones do. Gradients, moments, the
 * recurrent state, norms, A_log and D are always f32.
 */
public final class Trainer implements AutoCloseable {
    /** PyTorch's default ignore index for cross-entropy targets. */
    public static final int DEFAULT_IGNORE_INDEX = -100;

    private final MambaModel model;
    private final org.mamba4j.nativ.Trainer peer;
    private final int batch, seqLen, ignoreIndex, vocab, outputHead;
    private final List<String> names;
    private final long[] sizes;
    private final LearningRateSchedule schedule;
    private final NativeGuard guard;
    private volatile AdamW adamW;
    private final LossScaler lossScaler;

    private Trainer(Builder b) {
        this.model = b.model;
        this.batch = b.batch;
        this.seqLen = b.seqLen;
        this.ignoreIndex = b.ignoreIndex;
        this.vocab = b.vocab;
        this.outputHead = b.outputHead;
        this.schedule = b.schedule;
        this.adamW = b.adamW;
        // libmamba's trainer uses the model until it is destroyed: the model's peer stays until this one is freed
        NativeGuard.Guarded<org.mamba4j.nativ.Trainer> made = model.guard().newPinningDependent("Trainer", () -> {
            if (b.threads > 0) libmamba.setCpuThreads(b.threads);
            return new org.mamba4j.nativ.Trainer(model.peer(), batch, seqLen);
        }, p -> p::close);
        this.peer = made.peer();
        this.guard = made.guard();
        try {
            this.names = guard.get(() -> {
                if (b.vocab > 0) peer.addHead(b.vocab, b.headSeed);
                if (b.outputHead > 0) peer.addRegressionHead(b.outputHead, b.headSeed);
                List<String> n = new ArrayList<>();
                for (int i = 0; i < peer.paramCount(); i++) n.add(peer.paramName(i).getString());
                return Collections.unmodifiableList(n);
            });
            this.sizes = guard.get(() -> {
                long[] n = new long[names.size()];
                for (int i = 0; i < n.length; i++) n[i] = peer.paramSize(i);
                return n;
            });
            boolean[] decay = decayFlags(adamW.noDecayRule());  // user code, outside the native call
            guard.run(() -> {
                applyAdamW(adamW, decay);
                peer.setClipGradNorm((float) b.clip);
                peer.setStepGraphs(b.stepGraphs);
                if (b.lossScaler != null) {
                    try (org.mamba4j.nativ.LossScalerConfig c = new org.mamba4j.nativ.LossScalerConfig()) {
                        c.enabled(true).init_scale((float) b.lossScaler.initScale())
                                .growth_factor((float) b.lossScaler.growthFactor())
                                .backoff_factor((float) b.lossScaler.backoffFactor())
                                .growth_interval(b.lossScaler.growthInterval());
                        peer.setLossScaler(c);
                    }
                }
            });
            this.lossScaler = b.lossScaler;
        } catch (RuntimeException e) {
            guard.close();
            throw e;
        }
        guard.watch(this);
    }

    /** A builder for a trainer of {@code model}'s weights (a float-input backbone or a language model). */
    public static Builder builder(MambaModel model) {
        Objects.requireNonNull(model, "model");
        return new Builder(model);
    }

    /** Whether training runs on this device: the CPU always; a CUDA device when this build has CUDA and it is usable. */
    public static boolean supports(Device device) {
        Objects.requireNonNull(device, "device");
        Native.load();
        return NativeGuard.call(() -> libmamba.trainingSupported(device.code()));
    }

    public MambaModel model() { return model; }
    public int batch() { return batch; }
    public int seqLen() { return seqLen; }
    /** Floats per input position. */
    public int inputWidth() { return model.inputWidth(); }
    /** Floats per output position of forward/backward/step/stepMse: the {@link Builder#outputHead} width, or {@code dModel}. */
    public int outputWidth() { return outputHead > 0 ? outputHead : model.outputWidth(); }
    /** The output head's width ({@link Builder#outputHead}), or 0 without one. */
    public int outputHeadWidth() { return outputHead; }
    /** The cross-entropy head's vocabulary size, or 0 without one. */
    public int vocab() { return vocab; }

    // ---- fused steps ----

    /** Forward + backward of {@code dOutput} [B, T, outputWidth] + clip + AdamW. */
    public StepResult step(float[] inputs, float[] dOutput) {
        return step(inputs, dOutput, BackwardOptions.step());
    }

    /** Forward + backward of {@code dOutput} [B, T, outputWidth] (+ optimizer step, per {@code options}). */
    public StepResult step(float[] inputs, float[] dOutput, BackwardOptions options) {
        checkInputs(inputs);
        checkOutputs("dOutput", dOutput);
        Objects.requireNonNull(options, "options");
        return guard.get(() -> {
            prepareStep(options.applyOptimizer());
            float scale = (float) options.scale();
            boolean apply = options.applyOptimizer();
            if (!HostStaging.worth((long) inputs.length + dOutput.length))
                return result(peer.step(inputs, inputs.length, dOutput, dOutput.length, scale, apply), apply, false);
            try (HostStaging.Lease l = model.staging().lease()) {
                return result(peer.step(l.floats(inputs), inputs.length, l.floats(dOutput), dOutput.length, scale, apply),
                        apply, false);
            }
        });
    }

    /** Forward + mean-squared error against {@code targets} [B, T, outputWidth] + backward + clip + AdamW. */
    public StepResult stepMse(float[] inputs, float[] targets) {
        return stepMse(inputs, targets, BackwardOptions.step());
    }

    /** Forward + MSE (mean over all elements, as {@link MseLoss}) + backward (+ optimizer step). */
    public StepResult stepMse(float[] inputs, float[] targets, BackwardOptions options) {
        checkInputs(inputs);
        checkOutputs("targets", targets);
        Objects.requireNonNull(options, "options");
        return guard.get(() -> {
            prepareStep(options.applyOptimizer());
            float scale = (float) options.scale();
            boolean apply = options.applyOptimizer();
            if (!HostStaging.worth((long) inputs.length + targets.length))
                return result(peer.stepMse(inputs, inputs.length, targets, targets.length, scale, apply), apply, false);
            try (HostStaging.Lease l = model.staging().lease()) {
                return result(peer.stepMse(l.floats(inputs), inputs.length, l.floats(targets), targets.length, scale, apply),
                        apply, false);
            }
        });
    }

    /**
     * Forward + linear head + softmax cross-entropy against {@code targets} [B, T] (class indices, or the
     * ignore index for positions that do not count) + backward + clip + AdamW. The loss is the mean over
     * the counted positions; the result reports loss and accuracy.
     */
    public StepResult stepCrossEntropy(float[] inputs, int[] targets) {
        return stepCrossEntropy(inputs, targets, BackwardOptions.step());
    }

    /** As {@link #stepCrossEntropy(float[], int[])}, with backward options. */
    public StepResult stepCrossEntropy(float[] inputs, int[] targets, BackwardOptions options) {
        checkInputs(inputs);
        checkTargets(targets);
        Objects.requireNonNull(options, "options");
        checkCrossEntropyHead();
        return guard.get(() -> {
            prepareStep(options.applyOptimizer());
            float scale = (float) options.scale();
            boolean apply = options.applyOptimizer();
            if (!HostStaging.worth((long) inputs.length + targets.length))
                return result(peer.stepCrossEntropy(inputs, inputs.length, targets, targets.length, ignoreIndex, scale,
                        apply), apply, true);
            try (HostStaging.Lease l = model.staging().lease()) {
                return result(peer.stepCrossEntropy(l.floats(inputs), inputs.length, l.ints(targets), targets.length,
                        ignoreIndex, scale, apply), apply, true);
            }
        });
    }

    // ---- language models ----

    /**
     * One training step of a language model: forward of token ids [B, T] + the model's {@code lm_head} + softmax
     * cross-entropy against {@code targets} [B, T] + backward + clip + AdamW. The loss is the mean over the
     * positions whose target is not the ignore index (PyTorch's {@code reduction='mean'}); the result reports it
     * with the accuracy (argmax == target) over the same positions.
     *
     * <pre>{@code
     * int[] ids = new int[B * T], targets = new int[B * T];
     * for (int b = 0; b < B; b++)
     *     for (int t = 0; t < T; t++) {
     *         ids[b * T + t] = tokens[b][t];
     *         targets[b * T + t] = t + 1 < T ? tokens[b][t + 1] : Trainer.DEFAULT_IGNORE_INDEX;
     *     }
     * StepResult r = trainer.stepTokens(ids, targets);
     * }</pre>
     *
     * @throws IllegalArgumentException for arrays of the wrong length, an id outside {@code [0, vocabSize)}, or a
     *     target outside it that is not the ignore index
     * @throws IllegalStateException when the model is not a language model
     */
    public StepResult stepTokens(int[] ids, int[] targets) {
        return stepTokens(ids, targets, BackwardOptions.step());
    }

    /**
     * As {@link #stepTokens(int[], int[])}, with backward options: {@link BackwardOptions#accumulate()} adds this
     * micro-batch's gradient without stepping, {@code scale} multiplies it (see {@link BackwardOptions}).
     */
    public StepResult stepTokens(int[] ids, int[] targets, BackwardOptions options) {
        checkTokens(ids, targets);
        Objects.requireNonNull(options, "options");
        return guard.get(() -> {
            prepareStep(options.applyOptimizer());
            return result(peer.stepTokens(ids, ids.length, targets, targets.length, ignoreIndex, (float) options.scale(),
                    options.applyOptimizer()), options.applyOptimizer(), true);
        });
    }

    /**
     * The language-model loss and accuracy of the current weights on ids/targets [B, T], without gradients (as
     * {@link #stepTokens}, nothing accumulated or stepped).
     */
    public StepResult evaluateTokens(int[] ids, int[] targets) {
        checkTokens(ids, targets);
        return guard.get(() -> result(peer.evalTokens(ids, ids.length, targets, targets.length, ignoreIndex), false, true));
    }

    /**
     * Split form of {@link #stepTokens}, for a loss computed in Java (label smoothing, distillation, …): the
     * training forward of ids [B, T], returning every position's logits [B, T, vocab] (which, unlike
     * {@link #stepTokens}, do exist all at once) and keeping what {@link #backwardLogits} needs.
     *
     * @throws IllegalArgumentException when B·T·vocab exceeds a Java array
     */
    public float[] forwardTokens(int[] ids) {
        requireLanguageModel();
        Objects.requireNonNull(ids, "ids");
        Checks.length("ids", ids.length, (long) batch * seqLen);
        long n = (long) batch * seqLen * model.vocabSize();
        if (n > Integer.MAX_VALUE - 8)
            throw new IllegalArgumentException("batch * seqLen * vocab = " + n + " logits do not fit a Java array: use stepTokens");
        float[] logits = new float[(int) n];
        guard.run(() -> {
            if (!HostStaging.worth(logits.length)) peer.forwardTokens(ids, ids.length, logits, logits.length);
            else try (HostStaging.Lease l = model.staging().lease()) {
                FloatPointer o = l.floats(logits.length);
                peer.forwardTokens(l.ints(ids), ids.length, o, logits.length);
                o.get(logits);
            }
        });
        return logits;
    }

    /** Backward of the last {@link #forwardTokens} with {@code dLogits} = ∂L/∂logits [B, T, vocab], then clip + AdamW. */
    public StepResult backwardLogits(float[] dLogits) {
        return backwardLogits(dLogits, BackwardOptions.step());
    }

    /** Backward of the last {@link #forwardTokens} (each forward allows one backward), per {@code options}. */
    public StepResult backwardLogits(float[] dLogits, BackwardOptions options) {
        requireLanguageModel();
        Objects.requireNonNull(dLogits, "dLogits");
        Checks.length("dLogits", dLogits.length, (long) batch * seqLen * model.vocabSize());
        Objects.requireNonNull(options, "options");
        return guard.get(() -> {
            prepareStep(options.applyOptimizer());
            float scale = (float) options.scale();
            boolean apply = options.applyOptimizer();
            if (!HostStaging.worth(dLogits.length))
                return result(peer.backwardLogits(dLogits, dLogits.length, scale, apply), apply, false);
            try (HostStaging.Lease l = model.staging().lease()) {
                return result(peer.backwardLogits(l.floats(dLogits), dLogits.length, scale, apply), apply, false);
            }
        });
    }

    /** Cross-entropy loss and accuracy of the current weights, without gradients. Discards a pending {@link #forward}. */
    public StepResult evaluateCrossEntropy(float[] inputs, int[] targets) {
        checkInputs(inputs);
        checkTargets(targets);
        checkCrossEntropyHead();
        return guard.get(() -> {
            if (!HostStaging.worth((long) inputs.length + targets.length))
                return result(peer.evalCrossEntropy(inputs, inputs.length, targets, targets.length, ignoreIndex), false, true);
            try (HostStaging.Lease l = model.staging().lease()) {
                return result(peer.evalCrossEntropy(l.floats(inputs), inputs.length, l.ints(targets), targets.length,
                        ignoreIndex), false, true);
            }
        });
    }

    // ---- split forward / backward ----

    /** Training forward: returns the outputs [B, T, {@link #outputWidth()}] and keeps what {@link #backward} needs. */
    public float[] forward(float[] inputs) {
        checkInputs(inputs);
        float[] y = new float[batch * seqLen * outputWidth()];
        guard.run(() -> {
            if (!HostStaging.worth(Math.max(inputs.length, y.length))) peer.forward(inputs, inputs.length, y, y.length);
            else try (HostStaging.Lease l = model.staging().lease()) {
                FloatPointer o = l.floats(y.length);
                peer.forward(l.floats(inputs), inputs.length, o, y.length);
                o.get(y);
            }
        });
        return y;
    }

    /** Backward of the last {@link #forward} with {@code dOutput} = ∂L/∂outputs, then clip + AdamW. */
    public StepResult backward(float[] dOutput) {
        return backward(dOutput, BackwardOptions.step());
    }

    /** Backward of the last {@link #forward} (each forward allows one backward), per {@code options}. */
    public StepResult backward(float[] dOutput, BackwardOptions options) {
        checkOutputs("dOutput", dOutput);
        Objects.requireNonNull(options, "options");
        return guard.get(() -> {
            prepareStep(options.applyOptimizer());
            float scale = (float) options.scale();
            boolean apply = options.applyOptimizer();
            if (!HostStaging.worth(dOutput.length))
                return result(peer.backward(dOutput, dOutput.length, scale, apply), apply, false);
            try (HostStaging.Lease l = model.staging().lease()) {
                return result(peer.backward(l.floats(dOutput), dOutput.length, scale, apply), apply, false);
            }
        });
    }

    /** Clip + AdamW with the gradients accumulated so far, then clears them. */
    public StepResult optimizerStep() {
        return guard.get(() -> {
            prepareStep(true);
            return result(peer.optimizerStep(), true, false);
        });
    }

    /** Discards the accumulated gradients. */
    public void zeroGrad() {
        guard.run(peer::zeroGrad);
    }

    /** ∂L/∂inputs of the last backward, [B, T, inputWidth] (for stacking models or feeding other layers). */
    public float[] inputGradient() {
        requireFeatures();
        float[] dx = new float[batch * seqLen * inputWidth()];
        guard.run(() -> peer.readInputGradient(dx, dx.length));
        return dx;
    }

    /**
     * The accumulated gradient of one trainable tensor (zero right after an optimizer step); with a
     * {@link LossScaler}, times the loss scale.
     */
    public float[] gradient(String name) {
        int i = index(name);
        float[] g = new float[Math.toIntExact(sizes[i])];
        guard.run(() -> peer.readGrad(i, g, g.length));
        return g;
    }

    // ---- flat gradients (data-parallel exchange) ----

    /** Floats in {@link #gradients()}: the sizes of every trainable tensor, in {@link #parameterNames()} order. */
    public long gradientLength() {
        long n = 0;
        for (long size : sizes) n += size;
        return n;
    }

    /**
     * The accumulated gradient of every trainable tensor, concatenated in {@link #parameterNames()} order — what a
     * data-parallel communicator exchanges ({@link org.mamba4j.parallel.Communicator}). With a loss scaler the values
     * are the scaled gradients (times {@link #lossScale()}), as the optimizer step will unscale them.
     *
     * @throws IllegalStateException when the gradient does not fit a Java array
     */
    public float[] gradients() {
        float[] g = new float[flatLength()];
        guard.run(() -> peer.readGradients(g, g.length));
        return g;
    }

    /** Replaces the accumulated gradient of every trainable tensor (the layout of {@link #gradients()}). */
    public void setGradients(float[] gradients) {
        Objects.requireNonNull(gradients, "gradients");
        Checks.length("gradients", gradients.length, gradientLength());
        guard.run(() -> peer.writeGradients(gradients, gradients.length));
    }

    private int flatLength() {
        long n = gradientLength();
        if (n > Integer.MAX_VALUE - 8)
            throw new IllegalStateException(n + " gradients do not fit a Java array: exchange them on the device (NCCL)");
        return (int) n;
    }

    // ---- recurrent state / RL ----

    /**
     * A forward with no tape and no gradient, from a zero state — e.g. a target network in RL (it runs the
     * model's inference path; see {@link MambaModel#forward(float[], int, int)}). Any batch and length.
     */
    public float[] targetForward(float[] inputs, int batch, int steps) {
        guard.checkOpen();
        return model.forward(inputs, batch, steps);
    }

    /**
     * Burn-in: runs {@code prefix} [B, steps, inputWidth] from a zero state with no tape and no gradient;
     * the <em>next</em> forward (or fused step) starts from the state it reached. Applies once.
     */
    public void burnIn(float[] prefix, int steps) {
        requireFeatures();
        Checks.positive("steps", steps);
        Objects.requireNonNull(prefix, "prefix");
        Checks.length("prefix", prefix.length, (long) batch * steps * inputWidth());
        guard.run(() -> peer.burnIn(prefix, prefix.length, steps));
    }

    /** The next forward starts from a copy of {@code state} (a state of this model with {@link #batch()} rows). Applies once. */
    public void startFrom(MambaState state) {
        checkState(state);
        guard.run(() -> peer.setStartState(state.peer()), state.guard());
    }

    /** Copies the recurrent state reached at the end of the last forward into {@code state}. */
    public void readEndState(MambaState state) {
        checkState(state);
        guard.run(() -> peer.readEndState(state.peer()), state.guard());
    }

    // ---- loss scaling ----

    /** The loss scaler of {@link Builder#lossScaler}, or null. */
    public LossScaler lossScaler() {
        return lossScaler;
    }

    /** The scale of the next backward's gradients (1 without a loss scaler). */
    public double lossScale() {
        return guard.get(peer::lossScale);
    }

    /** Applied optimizer steps in a row since the loss scale last changed (0 without a loss scaler). */
    public long lossScalerCleanSteps() {
        return guard.get(peer::lossScalerCleanSteps);
    }

    /** Restores the loss scaler's state (e.g. on resume, from {@link #lossScale()} and {@link #lossScalerCleanSteps()}). */
    public void restoreLossScaler(double scale, long cleanSteps) {
        if (lossScaler == null) throw new IllegalStateException("this trainer has no loss scaler");
        if (!(scale > 0) || Float.isInfinite((float) scale))
            throw new IllegalArgumentException("loss scale " + scale + " must be finite and > 0");
        if (cleanSteps < 0) throw new IllegalArgumentException("clean steps " + cleanSteps + " must be >= 0");
        guard.run(() -> peer.setLossScalerState((float) scale, cleanSteps));
    }

    // ---- state carry with gradients ----

    /**
     * Turns on (or off) the gradient with respect to the start state: every later backward (fused or split, every
     * loss) also computes ∂L/∂(the state its forward started from), read with {@link #readStartStateGradient}. Off
     * by default: the start state is then a constant (truncated BPTT) and the backward skips that work (on a CUDA
     * device a Mamba-3 backward with state gradients runs the sequential kernels, not the chunked ones).
     */
    public void setStateGradients(boolean on) {
        guard.run(() -> peer.setStateGradients(on));
    }

    /** Whether backward computes the start state's gradient ({@link #setStateGradients}). */
    public boolean stateGradients() {
        return guard.get(peer::stateGradients);
    }

    /**
     * The next backward treats {@code gradient} as ∂L/∂(the state its forward ended in) and lets it flow back through
     * the window, in the scale of that backward's output gradient. Typically the start-state gradient of the
     * following window: re-running window k's forward from its start and backward with window k+1's start-state
     * gradient gives exactly the gradients of one backward through time over both windows. {@code gradient} is a
     * state of this model with {@link #batch()} rows holding gradient values in the state's row layout
     * ({@link MambaState}). Applies to one backward.
     */
    public void setEndStateGradient(MambaState gradient) {
        checkState(gradient);
        guard.run(() -> peer.setEndStateGradient(gradient.peer()), gradient.guard());
    }

    /**
     * Writes ∂L/∂(start state) of the last backward (times its scale) into {@code into}, in the state's row layout:
     * per row and layer, Mamba-1: the conv history's gradient then h's; Mamba-3: S, k_prev, v_prev, the angles.
     * Needs {@link #setStateGradients setStateGradients(true)} before that backward.
     */
    public void readStartStateGradient(MambaState into) {
        checkState(into);
        guard.run(() -> peer.readStartStateGradient(into.peer()), into.guard());
    }

    /** As {@link #readStartStateGradient(MambaState)}, as a new array [B, {@link MambaState#rowSize()}]. */
    public float[] startStateGradient() {
        try (MambaState g = model.newState(batch)) {
            readStartStateGradient(g);
            int n = g.rowSize();
            float[] out = new float[batch * n];
            float[] row = new float[n];
            for (int b = 0; b < batch; b++) {
                g.readRow(b, row);
                System.arraycopy(row, 0, out, b * n, n);
            }
            return out;
        }
    }

    // ---- optimizer ----

    public AdamW adamW() { return adamW; }

    /** The learning rate of the next optimizer step (a schedule overrides it at each step). */
    public double learningRate() {
        return guard.get(peer::learningRate);
    }

    /**
     * Whole-step CUDA graphs: {@link #stepMse} and {@link #stepTokens} with {@code apply} run forward, loss, backward,
     * clipping and AdamW as one captured graph from their second call with the same settings, bit-identical to the
     * eager step (ignored on the CPU; steps with a start state, state gradients or an end-state gradient run
     * eagerly). If a capture ever fails the trainer turns them off and {@link #stepGraphsOffReason} says why.
     */
    public void setStepGraphs(boolean on) {
        guard.run(() -> peer.setStepGraphs(on));
    }

    /** Whether whole-step graphs are on (see {@link #setStepGraphs}). */
    public boolean stepGraphs() {
        return guard.get(() -> peer.stepGraphs());
    }

    /** Why whole-step graphs turned themselves off, or the empty string. */
    public String stepGraphsOffReason() {
        return guard.get(() -> {
            org.bytedeco.javacpp.BytePointer reason = peer.stepGraphsOffReason();
            return reason == null ? "" : reason.getString();  // an empty std::string comes back as null
        });
    }

    /** Changes the learning rate from the next optimizer step on (for hand-made schedules). */
    public void setLearningRate(double lr) {
        AdamW next = adamW.learningRate(lr);  // validates lr
        guard.run(() -> {
            peer.setLearningRate((float) lr);
            adamW = next;
        });
    }

    /** Optimizer steps taken. */
    public long stepCount() {
        return guard.get(peer::stepCount);
    }

    /** Trainable tensors: the model's parameters, then {@code lm_head.weight} and {@code lm_head.bias} with a head. */
    public List<String> parameterNames() {
        return names;
    }

    /**
     * Whether weight decay applies to a tensor: libmamba's per-tensor default (not for norms, biases,
     * {@code A_log}, {@code D}) unless {@link AdamW#noDecay} gave a rule.
     */
    public boolean weightDecay(String name) {
        int i = index(name);
        return guard.get(() -> peer.weightDecay(i));
    }

    /** AdamW's moments and step count, for a bit-identical resume. */
    public OptimizerState exportOptimizerState() {
        Map<String, float[]> m = new LinkedHashMap<>(), v = new LinkedHashMap<>();
        long step = guard.get(() -> {
            for (int i = 0; i < names.size(); i++) {
                float[] a = new float[Math.toIntExact(sizes[i])], b = new float[a.length];
                peer.readMoment(0, i, a, a.length);
                peer.readMoment(1, i, b, b.length);
                m.put(names.get(i), a);
                v.put(names.get(i), b);
            }
            return peer.stepCount();
        });
        return new OptimizerState(step, m, v);
    }

    /** Restores AdamW's moments and step count (every tensor of this trainer must be present). */
    public void importOptimizerState(OptimizerState state) {
        Objects.requireNonNull(state, "state");
        List<float[]> ms = new ArrayList<>(), vs = new ArrayList<>();
        for (int i = 0; i < names.size(); i++) {
            String name = names.get(i);
            if (!state.names().contains(name))
                throw new IllegalArgumentException("the optimizer state has no moments for '" + name + "'");
            float[] a = state.firstMoment(name), b = state.secondMoment(name);
            Checks.length("moments of " + name, a.length, sizes[i]);
            ms.add(a);
            vs.add(b);
        }
        if (state.names().size() != names.size())
            throw new IllegalArgumentException("the optimizer state holds " + state.names().size()
                    + " tensors, this trainer " + names.size());
        guard.run(() -> {
            for (int i = 0; i < names.size(); i++) {
                peer.writeMoment(0, i, ms.get(i), ms.get(i).length);
                peer.writeMoment(1, i, vs.get(i), vs.get(i).length);
            }
            peer.setStepCount(state.step());
        });
    }

    // ---- head and weights ----

    /**
     * A copy of the head's weights: the cross-entropy head ([vocab, dModel]) or the output head ([width, dModel];
     * {@link LinearHead#vocab()} is then its width), e.g. to {@link LinearHead#save} it next to the model.
     */
    public LinearHead head() {
        checkHead();
        int P = names.size() - 2;
        float[] w = new float[Math.toIntExact(sizes[P])], b = new float[Math.toIntExact(sizes[P + 1])];
        guard.run(() -> {
            peer.readParam(P, w, w.length);
            peer.readParam(P + 1, b, b.length);
        });
        return new LinearHead(b.length, model.outputWidth(), w, b);
    }

    /** Replaces the head's weights (same shape: vocabulary or output width, and dModel), e.g. to resume from a saved head. */
    public void loadHead(LinearHead head) {
        Objects.requireNonNull(head, "head");
        guard.checkOpen();
        checkHead();
        int rows = vocab > 0 ? vocab : outputHead;
        if (head.vocab() != rows || head.dModel() != model.outputWidth())
            throw new IllegalArgumentException("the head is [" + head.vocab() + ", " + head.dModel() + "]; this trainer's is ["
                    + rows + ", " + model.outputWidth() + "]");
        int P = names.size() - 2;
        float[] w = head.weight(), b = head.bias();
        guard.run(() -> {
            peer.writeParam(P, w, w.length);
            peer.writeParam(P + 1, b, b.length);
        });
    }

    /** A new model of the same shape (every field: configuration, inputs, vocabulary, device, dtype) holding a copy of the current weights. */
    public MambaModel snapshot() {
        guard.checkOpen();
        return copyOf(model);
    }

    /** Copies the current weights into {@code into}, a model of the same shape. */
    public void snapshot(MambaModel into) {
        Objects.requireNonNull(into, "into");
        guard.checkOpen();
        copyWeights(model, into);
    }

    /** A new model with every field of {@code model} and a copy of its weights: what a snapshot is, for any model. */
    static MambaModel copyOf(MambaModel model) {
        MambaModel copy = model.toBuilder().build();
        try {
            copyWeights(model, copy);
            return copy;
        } catch (RuntimeException e) {
            copy.close();
            throw e;
        }
    }

    private static void copyWeights(MambaModel from, MambaModel into) {
        if (into == from) return;
        if (!from.sameShape(into))
            throw new IllegalArgumentException("snapshot needs a model of the same shape (configuration, inputDim, vocabSize,"
                    + " tieEmbeddings): " + into + " is not " + from);
        for (String name : from.parameterNames()) into.setParameter(name, from.getParameter(name));
    }

    /** True once this trainer was closed (a closed model does not count). */
    public boolean isClosed() {
        return guard.isClosed();
    }

    /**
     * Frees the trainer's native memory (gradients, moments, tape); waits for a call in progress. The model stays
     * open (a model closed earlier is freed now). Idempotent. Required: a trainer dropped without it is freed only
     * after a garbage collection, at no predictable time.
     */
    @Override
    public void close() {
        guard.close();
    }

    @Override
    public String toString() {
        return "Trainer{batch=" + batch + ", seqLen=" + seqLen + ", " + adamW + ", vocab=" + vocab()
                + (outputHead > 0 ? ", outputHead=" + outputHead : "") + "}";
    }

    // ---- internals ----

    /** This trainer's guard (it shares the model's lock and keeps the model's peer until it is freed). */
    NativeGuard guard() {
        return guard;
    }

    /** The native trainer, for calls made under {@link #guard()} (the NCCL communicator's device exchange). */
    org.mamba4j.nativ.Trainer peer() {
        return peer;
    }

    /** Per tensor, whether a user's no-decay rule lets weight decay apply; null keeps libmamba's flags. */
    private boolean[] decayFlags(Predicate<String> noDecay) {
        if (noDecay == null) return null;
        boolean[] decay = new boolean[names.size()];
        for (int i = 0; i < decay.length; i++) decay[i] = !noDecay.test(names.get(i));
        return decay;
    }

    /** Under the guard: AdamW's hyper-parameters and, with a user rule, the per-tensor decay flags. */
    private void applyAdamW(AdamW a, boolean[] decay) {
        try (AdamWConfig c = new AdamWConfig()) {
            c.lr((float) a.learningRate()).beta1((float) a.beta1()).beta2((float) a.beta2()).eps((float) a.eps())
                    .weight_decay((float) a.weightDecay());
            peer.setAdamW(c);
        }
        if (decay != null) for (int i = 0; i < decay.length; i++) peer.setWeightDecay(i, decay[i]);
    }

    /** Under the guard, before a call that may step the optimizer: the schedule's rate for the coming step. */
    private void prepareStep(boolean apply) {
        if (apply && schedule != null) {
            double lr = schedule.learningRate(peer.stepCount());
            if (!(lr >= 0) || Double.isInfinite(lr))
                throw new IllegalStateException("the schedule gave learning rate " + lr + " for step " + peer.stepCount());
            peer.setLearningRate((float) lr);
        }
    }

    private StepResult result(StepStats s, boolean apply, boolean crossEntropy) {
        try (s) {
            boolean stepped = s.applied();
            return new StepResult(s.step(), stepped, apply && !stepped, apply ? s.grad_norm() : Double.NaN,
                    s.learning_rate(), s.has_loss() ? s.loss() : Double.NaN,
                    s.has_loss() && crossEntropy ? s.accuracy() : Double.NaN, s.has_loss() ? s.counted() : 0,
                    s.loss_scale());
        }
    }

    private int index(String name) {
        int i = names.indexOf(Objects.requireNonNull(name, "name"));
        if (i < 0) throw new IllegalArgumentException("no trainable tensor named '" + name + "'");
        return i;
    }

    private void checkHead() {
        if (vocab == 0 && outputHead == 0)
            throw new IllegalStateException("this trainer has no head: build it with crossEntropyHead(vocab) or outputHead(width)");
    }

    private void checkCrossEntropyHead() {
        if (vocab == 0)
            throw new IllegalStateException("this trainer has no cross-entropy head: build it with crossEntropyHead(vocab)");
    }

    private void requireLanguageModel() {
        if (model.vocabSize() == 0)
            throw new IllegalStateException("token training needs a language model (built with vocabSize(...)); this"
                    + " model takes float inputs");
    }

    private void checkTokens(int[] ids, int[] targets) {
        requireLanguageModel();
        Objects.requireNonNull(ids, "ids");
        Objects.requireNonNull(targets, "targets");
        Checks.length("ids", ids.length, (long) batch * seqLen);
        Checks.length("targets", targets.length, (long) batch * seqLen);
    }

    private void requireFeatures() {
        if (model.vocabSize() > 0)
            throw new IllegalStateException("this model is a language model (vocabSize = " + model.vocabSize()
                    + "): train it on token ids with stepTokens");
    }

    private void checkInputs(float[] inputs) {
        requireFeatures();
        Objects.requireNonNull(inputs, "inputs");
        Checks.length("inputs", inputs.length, (long) batch * seqLen * inputWidth());
    }

    private void checkOutputs(String what, float[] v) {
        requireFeatures();
        Objects.requireNonNull(v, what);
        Checks.length(what, v.length, (long) batch * seqLen * outputWidth());
    }

    private void checkTargets(int[] targets) {
        Objects.requireNonNull(targets, "targets");
        Checks.length("targets", targets.length, (long) batch * seqLen);
    }

    private void checkState(MambaState state) {
        Objects.requireNonNull(state, "state");
        if (state.model() != model) throw new IllegalArgumentException("the state belongs to another model");
        if (state.batch() != batch)
            throw new IllegalArgumentException("the state holds " + state.batch() + " rows but the trainer's batch is " + batch);
    }

    /** Fluent builder for {@link Trainer}. */
    public static final class Builder {
        private final MambaModel model;
        private int batch = 1, seqLen = 1, threads = 0, vocab = 0, outputHead = 0, ignoreIndex = DEFAULT_IGNORE_INDEX;
        private long headSeed = 0;
        private AdamW adamW = AdamW.defaults();
        private double clip = 0;
        private boolean stepGraphs = false;
        private LearningRateSchedule schedule;
        private GemmMode gemmMode;
        private LossScaler lossScaler;

        private Builder(MambaModel model) {
            this.model = Objects.requireNonNull(model, "model");
        }

        /**
         * Sets the model's {@link GemmMode} (the trainer's forward follows the model's mode; backward products are
         * always reproducible). {@link GemmMode#DETERMINISTIC} makes the forward batch-invariant as well.
         */
        public Builder gemmMode(GemmMode mode) {
            this.gemmMode = Objects.requireNonNull(mode, "mode");
            return this;
        }

        /**
         * Dynamic loss scaling ({@link LossScaler#dynamic()}: GradScaler's semantics and defaults), for training with
         * 16-bit arithmetic; any dtype accepts it. Default: none (scale 1).
         */
        public Builder lossScaler(LossScaler scaler) {
            this.lossScaler = java.util.Objects.requireNonNull(scaler, "scaler");
            return this;
        }

        /** Sequences per step, B (default 1). */
        public Builder batch(int batch) {
            Checks.positive("batch", batch);
            this.batch = batch;
            return this;
        }

        /** Steps per sequence, T (default 1). */
        public Builder seqLen(int seqLen) {
            Checks.positive("seqLen", seqLen);
            this.seqLen = seqLen;
            return this;
        }

        /** The optimizer (default {@link AdamW#defaults()}). */
        public Builder adamW(AdamW adamW) {
            this.adamW = Objects.requireNonNull(adamW, "adamW");
            return this;
        }

        /** Whole-step CUDA graphs for stepMse / stepTokens (see {@link Trainer#setStepGraphs}); off by default. */
        public Builder stepGraphs(boolean on) {
            this.stepGraphs = on;
            return this;
        }

        /** Clips the global gradient norm to {@code maxNorm} before each optimizer step; 0 (default) disables. */
        public Builder clipGradNorm(double maxNorm) {
            if (!(maxNorm >= 0) || Double.isInfinite(maxNorm))
                throw new IllegalArgumentException("clipGradNorm = " + maxNorm + " must be finite and >= 0");
            this.clip = maxNorm;
            return this;
        }

        /** Sets the learning rate before every optimizer step from a schedule (overrides AdamW's rate). */
        public Builder schedule(LearningRateSchedule schedule) {
            this.schedule = Objects.requireNonNull(schedule, "schedule");
            return this;
        }

        /**
         * CPU threads for libmamba and OpenBLAS — a process-wide setting ({@code setCpuThreads}); by default
         * the current setting is kept. Results do not depend on it.
         */
        public Builder threads(int threads) {
            Checks.positive("threads", threads);
            this.threads = threads;
            return this;
        }

        /** Adds a learnable linear head [vocab, dModel] + bias for {@link Trainer#stepCrossEntropy}. */
        public Builder crossEntropyHead(int vocab) {
            Checks.positive("vocab", vocab);
            this.vocab = vocab;
            return this;
        }

        /**
         * Adds a learnable linear output head [width, dModel] + bias (U(±1/√dModel), bias 0; tensors
         * {@code regression_head.weight}, {@code regression_head.bias}) after the backbone's final norm: {@link #forward},
         * {@link #backward}, {@link #step} and {@link #stepMse} then work on its outputs [B, T, width] — e.g. width 1
         * for a scalar target per position. Trained by the same AdamW; {@link Trainer#head()} reads it. Not with
         * {@link #crossEntropyHead}, nor for a language model.
         */
        public Builder outputHead(int width) {
            Checks.positive("width", width);
            this.outputHead = width;
            return this;
        }

        /** Seed of the head's initialisation (default 0). */
        public Builder headSeed(long seed) {
            this.headSeed = seed;
            return this;
        }

        /** Cross-entropy and {@link Trainer#stepTokens} targets equal to this index do not count (default -100, as in PyTorch). */
        public Builder ignoreIndex(int ignoreIndex) {
            this.ignoreIndex = ignoreIndex;
            return this;
        }

        /** Allocates the trainer (gradients, AdamW moments, activation tape). */
        public Trainer build() {
            if (vocab > 0 && outputHead > 0)
                throw new IllegalStateException("a trainer has one head: crossEntropyHead(" + vocab + ") or outputHead("
                        + outputHead + "), not both");
            if (outputHead > 0 && model.vocabSize() > 0)
                throw new IllegalStateException("a language model trains its own lm_head with stepTokens: do not add"
                        + " outputHead(" + outputHead + ")");
            if (vocab > 0 && model.vocabSize() > 0)
                throw new IllegalStateException("a language model trains its own lm_head with stepTokens: do not add"
                        + " crossEntropyHead(" + vocab + ")");
            if (gemmMode != null) model.setGemmMode(gemmMode);
            return new Trainer(this);
        }
    }
}
