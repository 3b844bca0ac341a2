package org.mamba4j.lm;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Objects;
import java.util.function.Consumer;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.MambaModel;
import org.mamba4j.MambaState;

/**
 * A Mamba language model: token embedding → Mamba backbone (Mamba-1 or Mamba-3 SISO blocks) → final norm → LM
 * head (tied or untied), with prompt prefill in one pass and sampled or greedy decoding.
 *
 * <p><b>Folders.</b> {@link #fromPretrained} reads a Mamba-1 folder in the HuggingFace {@code MambaForCausalLM} or
 * the state-spaces layout ({@link HfMambaConfig}), or a Mamba-3 folder in the official state-spaces layout
 * ({@code ssm_cfg.layer = "Mamba3"}, {@link Mamba3LMConfig}); config.json decides which. {@link #saveOfficial}
 * writes the official state-spaces layout, which {@code fromPretrained} reads back bit-exactly.
 *
 * <pre>{@code
 * try (MambaLM lm = MambaLM.fromPretrained(Path.of("mamba-130m-hf"), Device.best(), DType.BF16)) {
 *     lm.generate("The capital of France is", Sampling.greedy().maxNewTokens(20), System.out::print);
 * }
 * }</pre>
 * <p><b>Threads.</b> Separate {@code MambaLM} instances generate concurrently without affecting each other (each
 * owns its model and device resources). {@code generate} calls on ONE instance may also run concurrently: each
 * generation has its own state and sampler and the model serialises their steps, so each returns what it would
 * alone — but they take turns on the device; for throughput, batch the prompts into one call.
 */
public final class MambaLM implements AutoCloseable {
    private final MambaModel model;
    private final Tokenizer tokenizer;  // null when the folder has no tokenizer.json
    private final int vocabSize;        // the real vocabulary; logits beyond it (padding rows) are ignored
    private volatile boolean deviceSampling;

    /** Wraps a language model (vocabSize > 0); {@code vocabSize} ≤ its padded vocabulary; tokenizer may be null. */
    public MambaLM(MambaModel model, int vocabSize, Tokenizer tokenizer) {
        this.model = Objects.requireNonNull(model, "model");
        if (model.vocabSize() == 0) throw new IllegalArgumentException("the model has no vocabulary (build it with vocabSize)");
        if (vocabSize < 1 || vocabSize > model.vocabSize())
            throw new IllegalArgumentException("vocabSize = " + vocabSize + " must be in [1, " + model.vocabSize() + "]");
        this.vocabSize = vocabSize;
        this.tokenizer = tokenizer;
        this.deviceSampling = true;
    }

    /**
     * Loads a model folder (config.json + safetensors, tokenizer.json if present): Mamba-1 in the HuggingFace or
     * state-spaces layout, or Mamba-3 SISO in the official state-spaces layout. Every tensor is checked before the
     * model is allocated; on any failure nothing stays allocated.
     *
     * @throws org.mamba4j.CheckpointException when the folder, its config.json or its weights are missing,
     *     corrupt, or describe a model mamba4j does not implement
     */
    public static MambaLM fromPretrained(Path dir, Device device, DType dtype) {
        return fromPretrained(dir, device, dtype, LoadListener.NONE);
    }

    /** As {@link #fromPretrained(Path, Device, DType)}, reporting progress per tensor. */
    public static MambaLM fromPretrained(Path dir, Device device, DType dtype, LoadListener listener) {
        try (HfCheckpoint ckpt = HfCheckpoint.open(dir)) {
            MambaModel model = ckpt.load(device, dtype, listener);
            Tokenizer tok = null;
            try {
                if (Files.isRegularFile(dir.resolve("tokenizer.json"))) tok = Tokenizer.fromFile(dir.resolve("tokenizer.json"));
                return new MambaLM(model, ckpt.vocabSize, tok);
            } catch (RuntimeException e) {
                model.close();
                if (tok != null) tok.close();
                throw e;
            }
        }
    }

    /**
     * Writes this model as a folder in the official state-spaces/mamba layout that {@code
     * MambaLMHeadModel.from_pretrained}'s config and state dict use: {@code config.json} (a {@code MambaConfig}
     * with {@code ssm_cfg.layer} "Mamba3" or "Mamba1", every mixer option written out, {@code vocab_size} = {@link
     * #vocabSize()} and a {@code pad_vocab_size_multiple} that pads it to the model's rows) and {@code
     * model.safetensors} (f32; the official tensor names, {@code backbone.embedding.weight} included; a tied head
     * is stored under {@code lm_head.weight} as well, as the official state dict lists it). The folder is created
     * if needed. Each file is written atomically (temporary file + rename), the weights first. The tokenizer is not
     * written: copy {@code tokenizer.json} next to the files to keep it. {@link #fromPretrained} reads the folder
     * back with the same weights, bit for bit. In Python, {@code MambaLMHeadModel(MambaConfig(**json.load(f)))}
     * builds the model and {@code model.load_state_dict(safetensors.torch.load_file("model.safetensors"))} fills it
     * ({@code mamba_ssm}'s own {@code from_pretrained} reads {@code pytorch_model.bin} instead).
     *
     * @throws IllegalStateException when the block norm epsilon is not the official 1e-5 ({@code MambaConfig} has
     *     no field for it: save with {@link MambaModel#save} instead), or the model is closed
     * @throws org.mamba4j.CheckpointException when a file cannot be written
     */
    public void saveOfficial(Path dir) {
        Objects.requireNonNull(dir, "dir");
        OfficialFolder.write(this, dir);
    }

    /**
     * Writes this Mamba-1 language model as a HuggingFace transformers folder ({@code config.json} with
     * {@code MambaConfig}'s keys, {@code model.safetensors} in f32 with transformers' names; a tied head is not
     * stored), which {@code MambaForCausalLM.from_pretrained(dir)} and {@link #fromPretrained} both load. transformers
     * has a single vocabulary size, so {@code vocab_size} is the embedding's (padded) row count. Each file is written
     * atomically (temporary file + rename), the weights first; copy {@code tokenizer.json} next to them to keep it.
     *
     * <pre>{@code
     * lm.savePretrained(Path.of("my-model"));
     * // Python: MambaForCausalLM.from_pretrained("my-model")
     * }</pre>
     *
     * @throws IllegalStateException for a Mamba-3 model (transformers has no class for it: use {@link #saveOfficial}),
     *     or a closed model
     * @throws org.mamba4j.CheckpointException when a file cannot be written
     */
    public void savePretrained(Path dir) {
        Objects.requireNonNull(dir, "dir");
        HfFolder.write(this, dir);
    }

    /** The model (for parameters, saving, states). */
    public MambaModel model() { return model; }
    /** The real vocabulary size (≤ the padded rows of the embedding). */
    public int vocabSize() { return vocabSize; }
    /** The tokenizer found next to the weights, or null. */
    public Tokenizer tokenizer() { return tokenizer; }

    /** Logits of every position of one prompt from a fresh state: [T · paddedVocab]. */
    public float[] logits(int[] prompt) {
        requirePrompt(prompt);
        return model.forwardTokens(null, prompt, 1, prompt.length);
    }

    /** Generates from one token prompt; returns the new tokens (stop token included if hit). */
    public int[] generate(int[] prompt, Sampling sampling, TokenListener listener) {
        return generate(new int[][] {prompt}, sampling, listener)[0];
    }

    /**
     * Generates for several prompts at once: prompts of equal length are prefilled together in one pass (all of
     * them in the decode state itself when every prompt has the same length), then all rows decode together with
     * independent random streams (each seeded by {@code sampling.seed()}), so each row follows the same trajectory
     * as generating it alone (up to float rounding of batched products). A row stops at a stop token or after
     * maxNewTokens; returns each row's new tokens.
     *
     * <p>With {@link #deviceSampling()} on (the default on the CPU), tokens are sampled by libmamba on the model's device
     * ({@link org.mamba4j.DeviceSampler}): each step moves only token ids between host and device, and on CUDA with
     * graphs the step and the sampling replay as one graph. The tokens are those {@link TokenSampler} would choose
     * from the same logits (the same rule and arithmetic), so switching it off changes nothing but the speed.
     */
    public int[][] generate(int[][] prompts, Sampling sampling, TokenListener listener) {
        Objects.requireNonNull(sampling, "sampling");
        Objects.requireNonNull(listener, "listener");
        Objects.requireNonNull(prompts, "prompts");
        int B = prompts.length;
        if (B == 0) throw new IllegalArgumentException("no prompts");
        for (int[] p : prompts) requirePrompt(p);
        int maxNew = sampling.maxNewTokens();
        int[][] out = new int[B][maxNew];
        int[] lengths = new int[B];
        boolean[] done = new boolean[B];
        Session session = takeSession(B);
        try {
            MambaState state = session.state;
            RowSampler rows = deviceSampling ? new DeviceRows(session.sampler(), prompts, sampling) : new HostRows(prompts, sampling);
            try {
                int[] next = rows.prefill(state, prompts);
                for (int step = 0; ; step++) {
                    boolean any = false;
                    for (int b = 0; b < B; b++) {
                        if (done[b]) continue;
                        int tok = next[b];
                        out[b][lengths[b]++] = tok;
                        listener.onToken(b, tok);
                        if (sampling.isStopToken(tok) || lengths[b] == maxNew) done[b] = true;
                        else any = true;
                    }
                    if (!any || step + 1 == maxNew) break;
                    next = rows.step(state, next, done);  // finished rows keep stepping their last token, ignored
                }
            } finally {
                rows.close();
            }
        } catch (RuntimeException | Error e) {
            session.close();
            throw e;
        }
        giveBack(session);
        for (int b = 0; b < B; b++) out[b] = Arrays.copyOf(out[b], lengths[b]);
        return out;
    }

    /**
     * The state (and device sampler) of the last generate call, kept for the next call of the same batch size: the
     * same memory means CUDA graphs captured for it replay instead of being captured again each call. Concurrent
     * calls each get their own (only one is kept).
     */
    private final class Session implements AutoCloseable {
        final int batch;
        final MambaState state;
        private org.mamba4j.DeviceSampler sampler;

        Session(int batch) {
            this.batch = batch;
            this.state = model.newState(batch);
        }

        org.mamba4j.DeviceSampler sampler() {
            if (sampler == null) sampler = model.newSampler(batch, vocabSize);
            return sampler;
        }

        @Override
        public void close() {
            state.close();
            if (sampler != null) sampler.close();
        }
    }

    private final java.util.concurrent.atomic.AtomicReference<Session> idle = new java.util.concurrent.atomic.AtomicReference<>();

    private Session takeSession(int batch) {
        Session s = idle.getAndSet(null);
        if (s != null && s.batch == batch) {
            s.state.reset();
            return s;
        }
        if (s != null) s.close();
        return new Session(batch);
    }

    private void giveBack(Session s) {
        if (!idle.compareAndSet(null, s)) s.close();
    }

    /** Whether {@link #generate} samples on the model's device (default: true, on the CPU and on CUDA alike). */
    public boolean deviceSampling() { return deviceSampling; }

    /**
     * Samples on the model's device (true) or on the host with {@link TokenSampler} (false: every step copies all
     * logits to the host). Both give the same tokens; the host path exists for comparison and debugging.
     * Affects later {@link #generate} calls.
     */
    public void setDeviceSampling(boolean on) { deviceSampling = on; }

    /**
     * Prefill and one decode step of every row of a generate call, returning the next token of each row. Prompts
     * are grouped by length; one group holding every prompt is prefilled in the decode state itself, others in a
     * scratch state whose rows are then copied into place.
     */
    private abstract class RowSampler implements AutoCloseable {
        /** Prefills every prompt into {@code state} and returns each row's first token. */
        int[] prefill(MambaState state, int[][] prompts) {
            int B = prompts.length, V = model.vocabSize();
            java.util.Map<Integer, java.util.List<Integer>> byLength = new java.util.TreeMap<>();
            for (int b = 0; b < B; b++) byLength.computeIfAbsent(prompts[b].length, k -> new java.util.ArrayList<>()).add(b);
            if (byLength.size() == 1) {
                int T = prompts[0].length;
                int[] ids = new int[B * T];
                for (int b = 0; b < B; b++) System.arraycopy(prompts[b], 0, ids, b * T, T);
                return prefillAll(state, ids, T);
            }
            float[] logits = new float[B * V];
            for (java.util.Map.Entry<Integer, java.util.List<Integer>> g : byLength.entrySet()) {
                int T = g.getKey(), n = g.getValue().size();
                int[] ids = new int[n * T];
                for (int j = 0; j < n; j++) System.arraycopy(prompts[g.getValue().get(j)], 0, ids, j * T, T);
                float[] groupLogits = new float[n * V];
                try (MambaState scratch = model.newState(n)) {
                    model.prefillTokens(scratch, ids, T, groupLogits);
                    for (int j = 0; j < n; j++) {
                        int b = g.getValue().get(j);
                        state.copyRowFrom(b, scratch, j);
                        System.arraycopy(groupLogits, j * V, logits, b * V, V);
                    }
                }
            }
            return sampleHostLogits(logits);
        }

        /** Prefills ids [B, T] in the decode state and samples each row's first token. */
        abstract int[] prefillAll(MambaState state, int[] ids, int T);
        /** Samples every row from host logits [B, paddedVocab] (the first token after a grouped prefill). */
        abstract int[] sampleHostLogits(float[] logits);
        /** One decode step of every row on {@code ids}; returns the next tokens (entries of done rows are ignored). */
        abstract int[] step(MambaState state, int[] ids, boolean[] done);
        @Override public void close() {}
    }

    /** Sampling on the model's device: only token ids cross. */
    private final class DeviceRows extends RowSampler {
        private final org.mamba4j.DeviceSampler sampler;
        private final int[] next;

        DeviceRows(org.mamba4j.DeviceSampler sampler, int[][] prompts, Sampling s) {
            this.sampler = sampler;
            for (int b = 0; b < prompts.length; b++)
                sampler.setRow(b, s.temperature(), s.topK(), s.topP(), s.minP(), s.repetitionPenalty(), s.seed(), prompts[b]);
            next = new int[prompts.length];
        }

        @Override int[] prefillAll(MambaState state, int[] ids, int T) {
            model.prefillTokensSample(state, sampler, ids, T, next);
            return next;
        }

        @Override int[] sampleHostLogits(float[] logits) { return sampler.sample(logits, model.vocabSize()); }

        @Override int[] step(MambaState state, int[] ids, boolean[] done) {
            model.stepTokensSample(state, sampler, ids, next);
            return next;
        }

    }

    /** Sampling on the host with one TokenSampler per row: every step copies all logits. */
    private final class HostRows extends RowSampler {
        private final TokenSampler[] samplers;
        private final int[][] history;
        private final int[] historyLength;
        private final int[] next;
        private float[] logits;

        HostRows(int[][] prompts, Sampling s) {
            int B = prompts.length;
            samplers = new TokenSampler[B];
            history = new int[B][];
            historyLength = new int[B];
            for (int b = 0; b < B; b++) {
                samplers[b] = new TokenSampler(s);
                history[b] = Arrays.copyOf(prompts[b], prompts[b].length + s.maxNewTokens());
                historyLength[b] = prompts[b].length;
            }
            next = new int[B];
        }

        @Override int[] prefillAll(MambaState state, int[] ids, int T) {
            logits = new float[next.length * model.vocabSize()];
            model.prefillTokens(state, ids, T, logits);
            return sampleRows(null);
        }

        @Override int[] sampleHostLogits(float[] l) {
            logits = l;
            return sampleRows(null);
        }

        @Override int[] step(MambaState state, int[] ids, boolean[] done) {
            model.stepTokens(state, ids, logits);
            return sampleRows(done);
        }

        private int[] sampleRows(boolean[] done) {
            int V = model.vocabSize();
            for (int b = 0; b < next.length; b++) {
                if (done != null && done[b]) continue;
                int tok = samplers[b].next(logits, b * V, vocabSize, history[b], historyLength[b]);
                if (historyLength[b] < history[b].length) history[b][historyLength[b]++] = tok;
                next[b] = tok;
            }
            return next;
        }
    }

    /**
     * Text in, text out with the bundled tokenizer: streams decoded text to {@code onText} as tokens arrive
     * and returns the whole generated text. The tokenizer's end-of-text token stops generation too.
     */
    public String generate(String prompt, Sampling sampling, Consumer<String> onText) {
        if (tokenizer == null) throw new IllegalStateException("no tokenizer.json was found next to the model");
        int[] ids = tokenizer.encode(prompt);
        Integer eos = tokenizer.eosTokenId();
        Sampling s = sampling;
        if (eos != null) {
            int[] stops = Arrays.copyOf(sampling.stopTokens(), sampling.stopTokens().length + 1);
            stops[stops.length - 1] = eos;
            s = sampling.stopTokens(stops);
        }
        Tokenizer.StreamDecoder decoder = tokenizer.streamDecoder(true);
        generate(ids, s, (row, tok) -> {
            String piece = decoder.push(tok);
            if (!piece.isEmpty()) onText.accept(piece);
        });
        String tail = decoder.flush();
        if (!tail.isEmpty()) onText.accept(tail);
        return decoder.text();
    }

    private void requirePrompt(int[] prompt) {
        if (prompt == null || prompt.length == 0) throw new IllegalArgumentException("the prompt is empty");
        for (int i = 0; i < prompt.length; i++)
            if (prompt[i] < 0 || prompt[i] >= vocabSize)
                throw new IllegalArgumentException("prompt token " + prompt[i] + " at " + i + " is outside the vocabulary [0, " + vocabSize + ")");
    }

    /** Frees the model and the tokenizer. */
    @Override
    public void close() {
        Session s = idle.getAndSet(null);
        if (s != null) s.close();
        model.close();
        if (tokenizer != null) tokenizer.close();
    }
}
