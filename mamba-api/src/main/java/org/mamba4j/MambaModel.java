package org.mamba4j;

import java.nio.FloatBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import org.bytedeco.javacpp.FloatPointer;
import org.bytedeco.javacpp.Pointer;
import org.mamba4j.nativ.Model;
import org.mamba4j.nativ.ParamLayout;

/**
 * A Mamba backbone with its weights on a {@link Device}: optional input projection
 * (inputDim → d_model, with bias), N residual Mamba blocks, and a final RMSNorm applied to every output.
 * The blocks are those of its {@link ModelConfig}'s architecture (Mamba-1: {@link Mamba1Config}).
 *
 * <pre>{@code
 * try (MambaModel model = MambaModel.builder(Mamba1Config.defaults()).inputDim(32).seed(42).build();
 *      MambaState state = model.newState(4)) {
 *     float[] y = model.step(state, x);   // x: [4 * 32] → y: [4 * 128]
 * }
 * }</pre>
 *
 * <p><b>Copies.</b> {@code float[]} arguments are copied into native memory and results copied back
 * (JNI array access); direct {@link FloatBuffer}s are used in place on the CPU (no copy). On a GPU,
 * host data is always staged through device memory.
 *
 * <p><b>Threads.</b> Any number of models may be used from any number of threads at once, on the CPU and
 * on a GPU: each model owns its native resources (on a GPU its own CUDA stream, cuBLAS handle, workspaces,
 * staging buffers and captured graphs), so one thread's calls never change another's results — every
 * thread gets exactly the bits it would get alone. One model may also be shared between threads: its
 * calls (and those of its states and trainer) are serialised by one lock, and results are the same as in
 * any sequential order of those calls; give each thread its own {@link MambaState}. For throughput, batch
 * sequences into one state instead of calling from many threads. On the CPU, concurrent calls share one
 * worker pool: an op that finds it busy runs on the calling thread (same bits, less parallelism).
 * Every call after {@link #close()} throws {@link IllegalStateException}.
 *
 * <p><b>Non-finite inputs.</b> {@code step}, {@code prefill} and {@code forward} reject a {@code float[]} or
 * {@code FloatBuffer} input holding NaN or ±Infinity with an {@link IllegalArgumentException} naming the first
 * such index ({@code x[i] is NaN}), before anything reaches native code: one such value would otherwise turn its
 * row's recurrent state into NaN for the rest of the sequence. The check reads the input once (about 0.35 ns per
 * float: 50 ns for a step of 128 input floats, next to ~30 µs for the step itself). {@link Tensor} inputs are not checked — their
 * data stays on the device, and the tensor path is for pipelines that own their data; a NaN there propagates to
 * that row's output and state until {@link MambaState#resetRow(int)}. Weights are always finite:
 * {@link #setParameter} and the loaders reject non-finite values, and training never applies a non-finite step
 * ({@link StepResult#skipped()}).
 *
 * <p><b>Direct buffers</b> must be in the platform's byte order ({@code ByteBuffer.allocateDirect(n)
 * .order(ByteOrder.nativeOrder()).asFloatBuffer()}): libmamba reads their memory as native floats, so any
 * other order is rejected with {@link IllegalArgumentException}.
 */
public final class MambaModel implements AutoCloseable {
    private final ModelConfig config;
    private final int inputDim;
    private final int vocabSize;
    private final boolean tieEmbeddings;
    private final Device device;
    private final DType dtype;
    private final Model peer;
    private final NativeGuard guard;
    private final HostStaging staging;
    private final List<String> names;

    private MambaModel(ModelConfig config, int inputDim, int vocabSize, boolean tieEmbeddings, Device device, DType dtype,
                       long seed) {
        Native.load();
        this.config = config;
        this.inputDim = inputDim;
        this.vocabSize = vocabSize;
        this.tieEmbeddings = tieEmbeddings;
        this.device = device;
        this.staging = new HostStaging(device.code());
        this.dtype = dtype;
        try (org.mamba4j.nativ.ModelConfig c = ModelConfigs.toNative(config, inputDim, vocabSize, tieEmbeddings)) {
            this.peer = NativeGuard.config(() -> new Model(c, device.code(), dtype.code, seed));
        }
        Model model = this.peer;
        HostStaging buffers = this.staging;
        this.guard = NativeGuard.of("MambaModel", () -> {  // (no reference to this: the Cleaner may run it)
            model.close();
            buffers.close();
        });
        try {
            this.names = guard.get(() -> {
                List<String> n = new ArrayList<>();
                for (int i = 0; i < peer.paramCount(); i++) n.add(peer.paramName(i).getString());
                return Collections.unmodifiableList(n);
            });
        } catch (RuntimeException e) {
            guard.close();
            throw e;
        }
        guard.watch(this);
    }

    /** A builder for a model of this configuration (any architecture; {@link Mamba1Config} for Mamba-1). */
    public static Builder builder(ModelConfig config) {
        return new Builder(config);
    }

    /** Loads a mamba4j checkpoint (written by {@link #save}) onto the CPU. */
    public static MambaModel load(Path file) {
        return Checkpoints.load(file, Device.cpu(), DType.F32);
    }

    /** Loads a mamba4j checkpoint onto a device with the given weight storage type. */
    public static MambaModel load(Path file, Device device, DType dtype) {
        return Checkpoints.load(file, device, dtype);
    }

    /**
     * The architecture's hyper-parameters. A {@link Mamba1Config} for a Mamba-1 model: use
     * {@code model.config() instanceof Mamba1Config c} for its specific fields.
     */
    public ModelConfig config() { return config; }
    /** Width of an input projection, or 0 when inputs enter the residual stream directly. */
    public int inputDim() { return inputDim; }
    /** Floats per input position: {@code inputDim()}, or {@code dModel} without an input projection. */
    public int inputWidth() { return inputDim > 0 ? inputDim : config.dModel(); }
    /** Floats per output position ({@code dModel}). */
    public int outputWidth() { return config.dModel(); }
    /** Vocabulary size of a language model (token embedding in, logits out), or 0 for a float-input backbone. */
    public int vocabSize() { return vocabSize; }
    /** Whether the LM head reuses the embedding matrix. */
    public boolean tieEmbeddings() { return tieEmbeddings; }
    public Device device() { return device; }
    public DType dtype() { return dtype; }

    /**
     * On a CUDA device, records each decode step (per state and batch) as a CUDA graph the first time and
     * replays it afterwards — the same kernels, so results are bit-identical to eager steps, with far less
     * launch overhead. Ignored on the CPU.
     */
    public void setCudaGraphs(boolean enabled) {
        guard.run(() -> peer.setCudaGraphs(enabled));
    }

    /** Whether decode steps replay CUDA graphs. */
    public boolean cudaGraphs() {
        return guard.get(peer::cudaGraphs);
    }

    /** Sets how every product is computed (see {@link GemmMode}); captured CUDA graphs are dropped on a change. */
    public void setGemmMode(GemmMode mode) {
        Objects.requireNonNull(mode, "mode");
        guard.run(() -> peer.setGemmMode(mode.code));
    }

    /** How products are computed now (default {@link GemmMode#CUBLAS_FAST}). */
    public GemmMode gemmMode() {
        return GemmMode.ofCode(guard.get(peer::gemmMode));
    }

    /**
     * The CUDA stream ({@code cudaStream_t}) this model's calls enqueue their work on, as a JavaCPP pointer for
     * interop with {@code org.bytedeco:cuda} (wrap it as {@code new CUstream_st(model.cudaStream())}, or pass it to
     * {@code cublasSetStream_v2}). Work queued on it — a {@code cudaMemcpyAsync} into an input {@link Tensor}, a
     * cuBLAS call on an output — is ordered with the model's calls without a host synchronisation: it runs before
     * the model's next call and after its last one. The model's calls still return only when their results are
     * complete. The stream belongs to the model (do not destroy it) and is valid until the model is closed.
     *
     * <pre>{@code
     * cudart.cudaMemcpyAsync(x.pointer(), hostInput, x.bytes(), cudart.cudaMemcpyHostToDevice,
     *         new CUstream_st(model.cudaStream()));
     * model.step(state, x, y);   // sees the copied input: same stream, no cudaStreamSynchronize needed
     * }</pre>
     *
     * @throws IllegalStateException for a CPU model (it has no stream) or a closed one
     */
    public Pointer cudaStream() {
        if (!device.isCuda()) throw new IllegalStateException("a CPU model has no CUDA stream");
        return guard.get(peer::cudaStream);
    }

    /** A zeroed state for {@code batch} independent sequences. Close it when done. */
    public MambaState newState(int batch) {
        Checks.positive("batch", batch);
        return guard.get(() -> new MambaState(this, new org.mamba4j.nativ.State(peer, batch)));
    }

    // ---- inference ----

    /** One step for every row: x [B · inputWidth] → new array y [B · dModel]. Copies x in and y out. */
    public float[] step(MambaState state, float[] x) {
        float[] y = new float[state.batch() * outputWidth()];
        step(state, x, y);
        return y;
    }

    /** One step for every row into {@code y} [B · dModel]. */
    public void step(MambaState state, float[] x, float[] y) {
        checkState(state);
        Checks.length("x", x.length, (long) state.batch() * inputWidth());
        Checks.length("y", y.length, (long) state.batch() * outputWidth());
        Checks.finite("x", x);
        guard.run(() -> {
            if (!HostStaging.worth(Math.max(x.length, y.length))) peer.step(state.peer(), x, x.length, y, y.length);
            else try (HostStaging.Lease l = staging.lease()) {
                FloatPointer o = l.floats(y.length);
                peer.step(state.peer(), l.floats(x), x.length, o, y.length);
                o.get(y);
            }
        }, state.guard());
    }

    /** One step from direct buffers (positions honoured, limits not moved): no copies on the CPU. */
    public void step(MambaState state, FloatBuffer x, FloatBuffer y) {
        checkState(state);
        Checks.input("x", x, (long) state.batch() * inputWidth());
        Checks.output("y", y, (long) state.batch() * outputWidth());
        Checks.finite("x", x);
        guard.run(() -> peer.step(state.peer(), x, x.remaining(), y, y.remaining()), state.guard());
    }

    /**
     * One step on tensors that already live on this model's device (F32, x [B · inputWidth], y [B · dModel]):
     * no host copies at all — the fast path for GPU pipelines. Returns when y is written.
     */
    public void step(MambaState state, Tensor x, Tensor y) {
        checkState(state);
        Objects.requireNonNull(x, "x");
        Objects.requireNonNull(y, "y");
        if (!x.device().equals(device) || !y.device().equals(device))
            throw new IllegalArgumentException("tensors must live on " + device + " (x on " + x.device() + ", y on " + y.device() + ")");
        if (x.dtype() != DType.F32 || y.dtype() != DType.F32) throw new IllegalArgumentException("step tensors must be F32");
        Checks.length("x", x.size(), (long) state.batch() * inputWidth());
        Checks.length("y", y.size(), (long) state.batch() * outputWidth());
        guard.run(() -> peer.stepTensors(state.peer(), x.peer(), y.peer()), state.guard(), x.guard(), y.guard());
    }

    /**
     * Consumes a whole prompt of T steps per row, x [B, T, inputWidth] (row-major), carrying the state in
     * and out; returns the last position's output [B · dModel]. Equal to T calls of {@link #step}.
     */
    public float[] prefill(MambaState state, float[] x, int steps) {
        checkState(state);
        Checks.positive("steps", steps);
        Checks.length("x", x.length, (long) state.batch() * steps * inputWidth());
        Checks.finite("x", x);
        float[] y = new float[state.batch() * outputWidth()];
        guard.run(() -> {
            if (!HostStaging.worth(Math.max(x.length, y.length))) peer.prefill(state.peer(), x, x.length, steps, y, y.length);
            else try (HostStaging.Lease l = staging.lease()) {
                FloatPointer o = l.floats(y.length);
                peer.prefill(state.peer(), l.floats(x), x.length, steps, o, y.length);
                o.get(y);
            }
        }, state.guard());
        return y;
    }

    /** Prefill from direct buffers: x [B, T, inputWidth], y receives [B, dModel]. */
    public void prefill(MambaState state, FloatBuffer x, int steps, FloatBuffer y) {
        checkState(state);
        Checks.positive("steps", steps);
        Checks.input("x", x, (long) state.batch() * steps * inputWidth());
        Checks.output("y", y, (long) state.batch() * outputWidth());
        Checks.finite("x", x);
        guard.run(() -> peer.prefill(state.peer(), x, x.remaining(), steps, y, y.remaining()), state.guard());
    }

    /** Every position's output for x [B, T, inputWidth] from a zero state: returns [B, T, dModel]. */
    public float[] forward(float[] x, int batch, int steps) {
        return forward(null, x, batch, steps);
    }

    /**
     * Every position's output [B, T, dModel]; with a state it starts from and advances that state
     * (B = state.batch()), with {@code null} it starts from zeros and keeps nothing.
     */
    public float[] forward(MambaState state, float[] x, int batch, int steps) {
        Checks.positive("batch", batch);
        Checks.positive("steps", steps);
        if (state != null) checkState(state, batch);
        Checks.length("x", x.length, (long) batch * steps * inputWidth());
        Checks.finite("x", x);
        long n = (long) batch * steps * outputWidth();
        if (n > Integer.MAX_VALUE - 8) throw new IllegalArgumentException("output of " + n + " floats does not fit a Java array");
        float[] y = new float[(int) n];
        Runnable call = () -> {
            org.mamba4j.nativ.State st = state == null ? null : state.peer();
            if (!HostStaging.worth(Math.max(x.length, y.length))) peer.forward(st, x, x.length, batch, steps, y, y.length);
            else try (HostStaging.Lease l = staging.lease()) {
                FloatPointer o = l.floats(y.length);
                peer.forward(st, l.floats(x), x.length, batch, steps, o, y.length);
                o.get(y);
            }
        };
        if (state == null) guard.run(call);
        else guard.run(call, state.guard());
        return y;
    }

    // ---- language models: token ids in, logits out ----

    /** One decode step of a language model: ids [B] → logits [B · vocab] (written into {@code logits}). */
    public void stepTokens(MambaState state, int[] ids, float[] logits) {
        checkState(state);
        requireVocab();
        Checks.length("ids", ids.length, state.batch());
        Checks.length("logits", logits.length, (long) state.batch() * vocabSize);
        guard.run(() -> {
            if (!HostStaging.worth(logits.length)) peer.stepTokens(state.peer(), ids, ids.length, logits, logits.length);
            else try (HostStaging.Lease l = staging.lease()) {
                FloatPointer o = l.floats(logits.length);
                peer.stepTokens(state.peer(), l.ints(ids), ids.length, o, logits.length);
                o.get(logits);
            }
        }, state.guard());
    }

    /** A prompt of {@code steps} tokens per row, ids [B, T], state carried; last position's logits [B · vocab]. */
    public void prefillTokens(MambaState state, int[] ids, int steps, float[] logits) {
        checkState(state);
        requireVocab();
        Checks.positive("steps", steps);
        Checks.length("ids", ids.length, (long) state.batch() * steps);
        Checks.length("logits", logits.length, (long) state.batch() * vocabSize);
        guard.run(() -> {
            if (!HostStaging.worth(logits.length))
                peer.prefillTokens(state.peer(), ids, ids.length, steps, logits, logits.length);
            else try (HostStaging.Lease l = staging.lease()) {
                FloatPointer o = l.floats(logits.length);
                peer.prefillTokens(state.peer(), l.ints(ids), ids.length, steps, o, logits.length);
                o.get(logits);
            }
        }, state.guard());
    }

    /**
     * A sampler of {@code batch} rows in this model's device memory, sampling the first {@code vocab} logits of each
     * row ({@code vocab <= vocabSize()}, e.g. the real vocabulary of a padded one). See {@link DeviceSampler}.
     */
    public DeviceSampler newSampler(int batch, int vocab) {
        requireVocab();
        Checks.positive("batch", batch);
        if (vocab < 1 || vocab > vocabSize)
            throw new IllegalArgumentException("vocab = " + vocab + " must be in [1, " + vocabSize + "]");
        return guard.get(() -> new DeviceSampler(this, new org.mamba4j.nativ.Sampler(peer, batch, vocab)));
    }

    /**
     * {@link #stepTokens} followed by sampling each row's next token on this model's device with {@code sampler}:
     * ids [B] in, the sampled ids [B] into {@code next}; the logits never leave the device. Each sampled id joins its
     * row's history in the sampler. {@code ids} and {@code next} may be the same array.
     *
     * @throws MambaException when a row's logits hold NaN or +Infinity, or only -Infinity (the state has stepped)
     */
    public void stepTokensSample(MambaState state, DeviceSampler sampler, int[] ids, int[] next) {
        prefillTokensSample(state, sampler, ids, 1, next);
    }

    /** {@link #prefillTokens} of ids [B, steps] (state carried), then the first token of each row sampled into next [B]. */
    public void prefillTokensSample(MambaState state, DeviceSampler sampler, int[] ids, int steps, int[] next) {
        checkState(state);
        requireVocab();
        Objects.requireNonNull(sampler, "sampler");
        Objects.requireNonNull(ids, "ids");
        Objects.requireNonNull(next, "next");
        if (sampler.model() != this) throw new IllegalArgumentException("the sampler belongs to another model");
        if (sampler.batch() != state.batch())
            throw new IllegalArgumentException("the sampler has " + sampler.batch() + " rows but the state " + state.batch());
        Checks.positive("steps", steps);
        Checks.length("ids", ids.length, (long) state.batch() * steps);
        Checks.length("next", next.length, state.batch());
        int[] in = ids == next ? ids.clone() : ids;  // one array may be both (JNI copies each argument separately)
        guard.run(() -> peer.prefillTokensSample(state.peer(), sampler.peer(), in, in.length, steps, next, next.length),
                state.guard(), sampler.guard());
    }

    /** Every position's logits [B, T, vocab] from a zero state (state null) or carrying a state of B rows. */
    public float[] forwardTokens(MambaState state, int[] ids, int batch, int steps) {
        requireVocab();
        Checks.positive("batch", batch);
        Checks.positive("steps", steps);
        if (state != null) checkState(state, batch);
        Checks.length("ids", ids.length, (long) batch * steps);
        long n = (long) batch * steps * vocabSize;
        if (n > Integer.MAX_VALUE - 8) throw new IllegalArgumentException("logits of " + n + " floats do not fit a Java array");
        float[] logits = new float[(int) n];
        Runnable call = () -> {
            org.mamba4j.nativ.State st = state == null ? null : state.peer();
            if (!HostStaging.worth(logits.length))
                peer.forwardTokens(st, ids, ids.length, batch, steps, logits, logits.length);
            else try (HostStaging.Lease l = staging.lease()) {
                FloatPointer o = l.floats(logits.length);
                peer.forwardTokens(st, l.ints(ids), ids.length, batch, steps, o, logits.length);
                o.get(logits);
            }
        };
        if (state == null) guard.run(call);
        else guard.run(call, state.guard());
        return logits;
    }

    private void requireVocab() {
        if (vocabSize == 0) throw new IllegalStateException("this model has no vocabulary: build it with vocabSize(...)");
    }

    // ---- parameters ----

    /** Parameter names in HuggingFace convention, e.g. {@code backbone.layers.0.mixer.in_proj.weight}. */
    public List<String> parameterNames() {
        return names;
    }

    /** Total number of weights. */
    public long parameterCount() {
        return guard.get(() -> {
            long n = 0;
            for (int i = 0; i < names.size(); i++) n += peer.paramSize(i);
            return n;
        });
    }

    /** A parameter's shape (linear weights are [out, in], as in PyTorch). */
    public long[] parameterShape(String name) {
        int i = index(name);
        return guard.get(() -> {
            long[] shape = new long[peer.paramRank(i)];
            for (int a = 0; a < shape.length; a++) shape[a] = peer.paramDim(i, a);
            return shape;
        });
    }

    /** A copy of a parameter's values (row-major f32). */
    public float[] getParameter(String name) {
        int i = index(name);
        return guard.get(() -> {
            float[] v = new float[Math.toIntExact(peer.paramSize(i))];
            peer.readParam(i, v, v.length);
            return v;
        });
    }

    /** Overwrites a parameter (row-major f32, all values finite). */
    public void setParameter(String name, float[] values) {
        int i = index(name);
        Objects.requireNonNull(values, "values");
        Checks.length(name, values.length, parameterSize(i));
        Checks.finite(name, values);
        guard.run(() -> peer.writeParam(i, values, values.length));
    }

    private long parameterSize(int i) {
        return guard.get(() -> peer.paramSize(i));
    }

    // ---- checkpoints ----

    /** Writes a safetensors checkpoint atomically (temp file + rename): the old file survives any failure. */
    public void save(Path file) {
        guard.checkOpen();
        Checkpoints.save(this, file);
    }

    /**
     * Replaces this model's weights with a checkpoint's. Everything is validated and read before the
     * first weight changes, so a failed load leaves the model untouched.
     */
    public void loadWeights(Path file) {
        guard.checkOpen();
        Checkpoints.loadInto(this, file);
    }

    /** True once closed. */
    public boolean isClosed() {
        return guard.isClosed();
    }

    /**
     * Frees the weights; waits for a call in progress. States and trainers of this model must not be used
     * afterwards (they throw {@link IllegalStateException}), but closing them still frees their memory. While a
     * trainer of this model is open, the weights are freed when that trainer is closed (the trainer's native
     * memory refers to them). Idempotent and thread-safe.
     *
     * <p>Always close a model (try-with-resources): a model dropped without it is freed only after a garbage
     * collection finds it unreachable, at no predictable time, and native memory does not prompt collections.
     */
    @Override
    public void close() {
        guard.close();
    }

    @Override
    public String toString() {
        return "MambaModel{" + config + ", inputDim=" + inputDim + (vocabSize > 0 ? ", vocab=" + vocabSize : "") + ", "
                + device + ", " + dtype + "}";
    }

    // ---- internals ----

    /** The model's reusable native buffers for large inputs and outputs (also used by its trainers). */
    HostStaging staging() {
        return staging;
    }

    /** The peer, for native calls made under {@link #guard()} (by this model, its states and trainers). */
    Model peer() {
        guard.checkOpen();
        return peer;
    }

    /** The guard every native call on this model goes through; states and trainers share its lock. */
    NativeGuard guard() {
        return guard;
    }

    /**
     * A builder holding every field of this model — configuration, input width, vocabulary, tying, device and
     * dtype — so a copy (a trainer's snapshot) has exactly this model's shape.
     */
    Builder toBuilder() {
        return new Builder(config).inputDim(inputDim).vocabSize(vocabSize).tieEmbeddings(tieEmbeddings).device(device)
                .dtype(dtype).gemmMode(gemmMode());
    }

    /** Whether {@code other} has this model's shape: same configuration, input width, vocabulary and tying. */
    boolean sameShape(MambaModel other) {
        return other.config.equals(config) && other.inputDim == inputDim && other.vocabSize == vocabSize
                && other.tieEmbeddings == tieEmbeddings;
    }

    private int index(String name) {
        guard.checkOpen();
        int i = names.indexOf(Objects.requireNonNull(name, "name"));
        if (i < 0) throw new IllegalArgumentException("no parameter named '" + name + "'");
        return i;
    }

    private void checkState(MambaState state, int batch) {
        checkState(state);
        if (state.batch() != batch)
            throw new IllegalArgumentException("the state holds " + state.batch() + " rows but batch = " + batch);
    }

    private void checkState(MambaState state) {
        Objects.requireNonNull(state, "state");
        if (state.model() != this) throw new IllegalArgumentException("the state belongs to another model");
        state.guard().checkOpen();  // early, before buffers are allocated; the native call checks again under the lock
    }

    /** Fluent builder for {@link MambaModel}. */
    public static final class Builder {
        private final ModelConfig config;
        private int inputDim;
        private Device device = Device.cpu();
        private DType dtype = DType.F32;
        private long seed = 0;
        private int vocabSize = 0;
        private boolean tieEmbeddings = true;
        private GemmMode gemmMode = GemmMode.CUBLAS_FAST;

        private Builder(ModelConfig config) {
            this.config = Objects.requireNonNull(config, "config");
        }

        /** Adds an input projection inputDim → d_model (with bias); 0 (default) feeds inputs in directly. */
        public Builder inputDim(int inputDim) {
            if (inputDim < 0) throw new InvalidConfigException("inputDim = " + inputDim + " must be >= 0");
            this.inputDim = inputDim;
            return this;
        }

        /**
         * Makes a language model: token embedding [vocab, dModel] in, logits over the vocabulary out
         * (HF names backbone.embeddings.weight and, untied, lm_head.weight). 0 (default) = float inputs.
         */
        public Builder vocabSize(int vocabSize) {
            if (vocabSize < 0) throw new InvalidConfigException("vocabSize = " + vocabSize + " must be >= 0");
            this.vocabSize = vocabSize;
            return this;
        }

        /** Whether the LM head reuses the embedding matrix (default true, as HF tie_word_embeddings). */
        public Builder tieEmbeddings(boolean tie) {
            this.tieEmbeddings = tie;
            return this;
        }

        /** Where the weights live (default CPU). */
        public Builder device(Device device) {
            this.device = Objects.requireNonNull(device, "device");
            return this;
        }

        /** Weight storage type (default F32; every type works on every device, see {@link DType}). */
        public Builder dtype(DType dtype) {
            this.dtype = Objects.requireNonNull(dtype, "dtype");
            return this;
        }

        /** How products are computed (default {@link GemmMode#CUBLAS_FAST}); changeable later on the model. */
        public Builder gemmMode(GemmMode mode) {
            this.gemmMode = Objects.requireNonNull(mode, "mode");
            return this;
        }

        /** Seed of the paper initialisation: same seed, same weights (default 0). */
        public Builder seed(long seed) {
            this.seed = seed;
            return this;
        }

        /**
         * The parameters the model will have, without allocating it: HuggingFace names in parameter order, each
         * with its shape (linear weights [out, in]). libmamba's layout, the same the built model reports.
         *
         * @throws InvalidConfigException if the settings are out of range
         */
        public Map<String, long[]> parameterShapes() {
            checkLm();
            Native.load();
            try (org.mamba4j.nativ.ModelConfig c = ModelConfigs.toNative(config, inputDim, vocabSize, tieEmbeddings);
                 ParamLayout layout = NativeGuard.config(() -> new ParamLayout(c))) {
                return NativeGuard.call(() -> {
                    Map<String, long[]> shapes = new LinkedHashMap<>();
                    for (int i = 0; i < layout.count(); i++) {
                        long[] shape = new long[layout.rank(i)];
                        for (int a = 0; a < shape.length; a++) shape[a] = layout.dim(i, a);
                        shapes.put(layout.name(i).getString(), shape);
                    }
                    return shapes;
                });
            }
        }

        /** Allocates the model and initialises its weights. */
        public MambaModel build() {
            checkLm();
            MambaModel m = new MambaModel(config, inputDim, vocabSize, tieEmbeddings, device, dtype, seed);
            if (gemmMode != GemmMode.CUBLAS_FAST) {
                try {
                    m.setGemmMode(gemmMode);
                } catch (RuntimeException e) {
                    m.close();
                    throw e;
                }
            }
            return m;
        }

        private void checkLm() {
            if (vocabSize > 0 && inputDim > 0)
                throw new InvalidConfigException("inputDim = " + inputDim + " must be 0 for a language model (vocabSize > 0)");
        }
    }
}
