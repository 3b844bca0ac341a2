package org.mamba4j.lm;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import org.mamba4j.MambaException;
import org.mamba4j.MambaModel;
import org.mamba4j.MambaState;

/**
 * A continuous-batching generation engine for one {@link MambaLM}: requests from any number of threads join and
 * leave a shared batch between decode steps.
 *
 * <pre>{@code
 * try (Generator gen = Generator.builder(lm).slots(16).build()) {
 *     CompletableFuture<Completion> a = gen.submit(GenerationRequest.ofText("Hello", Sampling.greedy().maxNewTokens(32))).result();
 *     GenerationHandle b = gen.submit(GenerationRequest.ofText("Once", Sampling.ofTemperature(0.8).seed(7)));
 *     for (GeneratedToken t : b) System.out.print(t.text());     // streams b while a runs
 *     System.out.println(a.join().text());
 * }
 * }</pre>
 *
 * <p><b>How it runs.</b> One engine thread owns a pool state of {@link Builder#slots} rows. Each iteration it
 * (1) admits waiting requests into free slots, (2) prefills prompt chunks of admitted requests — up to {@link
 * Builder#prefillChunk} tokens of one request and {@link Builder#prefillTokensPerStep} tokens in all, requests
 * whose chunks have the same length batched into one call — in a separate scratch state, copying a row into its
 * pool slot after the prompt's last chunk, and (3) runs one decode step over the whole pool and samples a token
 * for every decoding request. A request leaves at a stop token, a stop string, {@code maxNewTokens}, cancellation
 * or a listener failure, and its slot is reused in the next iteration. Prefilling whole chunks (rather than feeding
 * prompts token by token through the shared decode step) keeps the time to first token at one prefill pass instead
 * of one decode step per prompt token; the per-iteration token budget keeps a long prompt from stalling the
 * decoding requests for more than one chunk's time.
 *
 * <p><b>Results.</b> Each request samples with its own {@link TokenSampler} seeded from its {@link Sampling#seed()},
 * exactly as {@link MambaLM#generate(int[], Sampling, TokenListener)} does, so a request gives the tokens it would
 * give alone. With {@link org.mamba4j.GemmMode#DETERMINISTIC} they are the same bit for bit, because the logits are:
 * in that mode a row's products do not depend on the batch, and a prefill split into chunks equals one prefill.
 * In the other modes, batched products may differ from a lone run in the last bits, which can flip a near tie.
 * Decode steps can sample on the model's device ({@link Builder#deviceSampling}; the default): the request's row of a
 * {@link org.mamba4j.DeviceSampler} continues its sampler's random stream with the same history, and the device
 * follows TokenSampler's rule bit for bit, so the tokens are the same; only token ids cross to the host.
 *
 * <p><b>Threads.</b> {@link #submit} may be called from any thread. Listeners run on the engine thread (keep them
 * short); {@link GenerationHandle#iterator()} streams on the caller's thread. Other users of the same {@code
 * MambaLM} take turns with the engine on the model's lock. {@link #close()} fails every unfinished request with
 * {@link GeneratorClosedException}; it does not close the {@code MambaLM}.
 *
 * <p><b>Memory.</b> The pool holds {@code slots} state rows on the model's device; up to {@code 2·prefillBatch − 1}
 * scratch rows more; a request whose prompt is longer than one chunk parks its row in a one-row state on the device
 * between chunks (chunks are served first come first served, so only a few requests are between chunks at once).
 */
public final class Generator implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger(Generator.class.getName());

    private final MambaLM lm;
    private final MambaModel model;
    private final Tokenizer tokenizer;
    private final int slots, prefillChunk, prefillTokensPerStep, maxPromptTokens, maxNewTokens, maxQueued;
    private final int paddedVocab;

    // shared with submitters, guarded by lock
    private final ReentrantLock lock = new ReentrantLock();
    private final Condition wake = lock.newCondition();
    private final ArrayDeque<ActiveRequest> incoming = new ArrayDeque<>();
    private boolean closed;
    private Throwable failure;           // why the engine stopped on its own
    private int waitingCount;            // incoming + waiting, for the queue limit

    // engine thread only
    private final ArrayDeque<ActiveRequest> waiting = new ArrayDeque<>();
    private final List<ActiveRequest> prefilling = new ArrayList<>();  // in admission order
    private final ActiveRequest[] bySlot;
    private final MambaState pool;
    private final BatchPrefill prefill;
    private final ExecutorService samplingPool;  // null: sample on the engine thread
    private final int samplingThreads;
    private final int[] stepIds, stepNext;
    private final float[] stepLogits;
    private final org.mamba4j.DeviceSampler sampler;  // null: every decode step samples on the host

    private volatile int activeCount;    // requests holding a slot (prefilling or decoding), for observers

    private final Thread engine;
    /** Test hook: record the logits of every sampled token on each handle (see GenerationHandle.logitsLog). */
    volatile boolean logLogits;

    private Generator(Builder b) {
        this.lm = b.lm;
        this.model = lm.model();
        this.tokenizer = lm.tokenizer();
        this.slots = b.slots;
        this.prefillChunk = b.prefillChunk;
        this.prefillTokensPerStep = b.prefillTokensPerStep;
        this.maxPromptTokens = b.maxPromptTokens;
        this.maxNewTokens = b.maxNewTokens;
        this.maxQueued = b.maxQueued;
        this.paddedVocab = model.vocabSize();
        this.bySlot = new ActiveRequest[slots];
        this.stepIds = new int[slots];
        this.stepNext = new int[slots];
        this.stepLogits = new float[Math.multiplyExact(slots, paddedVocab)];
        this.pool = model.newState(slots);
        this.sampler = b.deviceSampling ? model.newSampler(slots, lm.vocabSize()) : null;
        this.prefill = new BatchPrefill(model, b.prefillBatch);
        this.samplingThreads = b.samplingThreads;
        this.samplingPool = samplingThreads > 1 ? Executors.newFixedThreadPool(samplingThreads, r -> {
            Thread t = new Thread(r, "mamba4j-generator-sampler");
            t.setDaemon(true);
            return t;
        }) : null;
        this.engine = new Thread(this::run, "mamba4j-generator");
        engine.setDaemon(true);
        engine.start();
    }

    /** A builder for a generator over {@code lm} (which must stay open while the generator runs). */
    public static Builder builder(MambaLM lm) {
        return new Builder(lm);
    }

    // ---------------------------------------------------------------- submission

    /**
     * Queues a request; it starts as soon as a slot is free. Validates it first, on the calling thread.
     *
     * @throws IllegalArgumentException when the prompt is empty, holds a token outside the vocabulary, has more
     *     than {@link Builder#maxPromptTokens} tokens, asks for more than {@link Builder#maxNewTokens} new tokens,
     *     or is text (or has stop strings) while the model has no tokenizer
     * @throws GeneratorClosedException when the generator is closed (or stopped on a model error: the cause)
     * @throws RejectedExecutionException when {@link Builder#maxQueued} requests are already waiting for a slot
     */
    public GenerationHandle submit(GenerationRequest request) {
        Objects.requireNonNull(request, "request");
        checkOpen();
        int[] ids = promptIds(request);
        Sampling s = request.sampling();
        if (s.maxNewTokens() > maxNewTokens)
            throw new IllegalArgumentException("maxNewTokens " + s.maxNewTokens() + " is above this generator's limit of "
                    + maxNewTokens);
        if (!request.stopStrings().isEmpty() && tokenizer == null)
            throw new IllegalArgumentException("stop strings need a tokenizer, and this model has none");
        if (request.promptText() != null) s = withEos(s);
        GenerationHandle handle = new GenerationHandle(ids.length, logLogits);
        ActiveRequest r = new ActiveRequest(handle, ids, s, request.listener(), tokenizer, request.stopStrings());
        lock.lock();
        try {
            checkOpen();
            if (waitingCount >= maxQueued)
                throw new RejectedExecutionException(waitingCount + " requests are already waiting for a slot (the limit)");
            waitingCount++;
            incoming.add(r);
            wake.signal();
        } finally {
            lock.unlock();
        }
        return handle;
    }

    /** {@code submit(GenerationRequest.ofTokens(prompt, sampling)).result()}. */
    public CompletableFuture<Completion> generate(int[] prompt, Sampling sampling) {
        return submit(GenerationRequest.ofTokens(prompt, sampling)).result();
    }

    /** {@code submit(GenerationRequest.ofText(prompt, sampling)).result()}. */
    public CompletableFuture<Completion> generate(String prompt, Sampling sampling) {
        return submit(GenerationRequest.ofText(prompt, sampling)).result();
    }

    private int[] promptIds(GenerationRequest request) {
        int[] ids = request.idsUnsafe();
        if (ids == null) {
            if (tokenizer == null)
                throw new IllegalArgumentException("a text prompt needs a tokenizer, and this model has none: submit token ids");
            ids = tokenizer.encode(request.promptText());
        }
        if (ids.length == 0) throw new IllegalArgumentException("the prompt is empty");
        if (ids.length > maxPromptTokens)
            throw new IllegalArgumentException("the prompt has " + ids.length + " tokens, more than this generator's limit of "
                    + maxPromptTokens);
        int vocab = lm.vocabSize();
        for (int i = 0; i < ids.length; i++)
            if (ids[i] < 0 || ids[i] >= vocab)
                throw new IllegalArgumentException("prompt token " + ids[i] + " at " + i + " is outside the vocabulary [0, "
                        + vocab + ")");
        return ids;
    }

    /** Text prompts also stop at the tokenizer's end of text, as MambaLM.generate(String, ...) does. */
    private Sampling withEos(Sampling s) {
        Integer eos = tokenizer.eosTokenId();
        if (eos == null || s.isStopToken(eos)) return s;
        int[] stops = Arrays.copyOf(s.stopTokens(), s.stopTokens().length + 1);
        stops[stops.length - 1] = eos;
        return s.stopTokens(stops);
    }

    private void checkOpen() {
        lock.lock();
        try {
            if (failure != null) throw new GeneratorClosedException("the generator stopped after an error: " + failure, failure);
            if (closed) throw new GeneratorClosedException("the generator is closed");
        } finally {
            lock.unlock();
        }
    }

    // ---------------------------------------------------------------- observation

    /** One-row parking states the prefill has made (tests; read on the engine thread's terms: a snapshot). */
    int parkingStates() { return prefill.parkingStates(); }

    /** Number of state slots (the largest decode batch). */
    public int slots() { return slots; }

    /** Requests holding a slot now (prefilling or decoding). */
    public int activeRequests() { return activeCount; }

    /** Requests submitted and waiting for a slot. */
    public int waitingRequests() {
        lock.lock();
        try {
            return waitingCount;
        } finally {
            lock.unlock();
        }
    }

    /** Whether {@link #close()} was called or the engine stopped on an error. */
    public boolean isClosed() {
        lock.lock();
        try {
            return closed || failure != null;
        } finally {
            lock.unlock();
        }
    }

    /** The language model this generator runs. */
    public MambaLM languageModel() { return lm; }

    // ---------------------------------------------------------------- the engine

    private void run() {
        Throwable fatal = null;
        try {
            while (true) {
                lock.lock();
                try {
                    while (!closed && incoming.isEmpty() && idle()) wake.awaitUninterruptibly();
                    if (closed) break;
                    waiting.addAll(incoming);
                    incoming.clear();
                } finally {
                    lock.unlock();
                }
                dropFinished();
                admit();
                prefillChunks();
                decodeStep();
            }
        } catch (Throwable t) {
            fatal = t;
            LOG.log(System.Logger.Level.WARNING, "generator engine stopped: " + t, t);
        } finally {
            shutDown(fatal);
        }
    }

    private boolean idle() {
        if (!waiting.isEmpty() || !prefilling.isEmpty()) return false;
        for (ActiveRequest r : bySlot) if (r != null) return false;
        return true;
    }

    /** Forgets requests cancelled (or otherwise completed) from outside since the last iteration. */
    private void dropFinished() {
        for (Iterator<ActiveRequest> it = waiting.iterator(); it.hasNext(); ) {
            if (it.next().handle.isDone()) {
                it.remove();
                dequeued();
            }
        }
        prefilling.removeIf(r -> r.handle.isDone());
        for (int i = 0; i < slots; i++)
            if (bySlot[i] != null && bySlot[i].handle.isDone()) release(bySlot[i]);
    }

    private void admit() {
        for (int i = 0; i < slots && !waiting.isEmpty(); i++) {
            if (bySlot[i] != null) continue;
            ActiveRequest r = waiting.poll();
            dequeued();
            r.slot = i;
            bySlot[i] = r;
            activeCount++;
            prefilling.add(r);
        }
    }

    private void dequeued() {
        lock.lock();
        try {
            waitingCount--;
        } finally {
            lock.unlock();
        }
    }

    /** Up to prefillTokensPerStep prompt tokens (at least one chunk), chunks of equal length in one call. */
    private void prefillChunks() {
        if (prefilling.isEmpty()) return;
        Map<Integer, List<ActiveRequest>> byLength = new LinkedHashMap<>();
        int budget = prefillTokensPerStep;
        for (ActiveRequest r : prefilling) {
            int len = Math.min(prefillChunk, r.prompt.length - r.prefilled);
            if (len > budget && !byLength.isEmpty()) break;
            byLength.computeIfAbsent(len, k -> new ArrayList<>()).add(r);
            budget -= len;
        }
        for (Map.Entry<Integer, List<ActiveRequest>> e : byLength.entrySet())
            prefill.run(e.getValue(), e.getKey(), pool, this::firstToken);
        prefilling.removeIf(ActiveRequest::prefillDone);
    }

    /** The first token, from the prompt's last logits; the request then decodes from its slot. */
    private void firstToken(ActiveRequest r, float[] logits, int offset) {
        r.sample(logits, offset, lm.vocabSize());
        if (sampler != null && !logLogits && r.error == null && r.finish == null) {
            // The device row continues the host sampler's stream with the same history: the same tokens follow.
            Sampling s = r.sampling;
            try {
                sampler.setRow(r.slot, s.temperature(), s.topK(), s.topP(), s.minP(), s.repetitionPenalty(),
                        r.randomState(), r.historySoFar());
                r.onDevice = true;
            } catch (RuntimeException e) {
                r.error = e;
            }
        }
        emit(r);
    }

    /** One step of every slot (free slots step token 0, ignored), then one sampled token per decoding request. */
    private void decodeStep() {
        List<ActiveRequest> decoding = new ArrayList<>(slots);
        for (int i = 0; i < slots; i++) {
            ActiveRequest r = bySlot[i];
            boolean decodes = r != null && r.prefillDone();
            stepIds[i] = decodes ? r.nextInput() : 0;
            if (decodes) decoding.add(r);
        }
        if (decoding.isEmpty()) return;
        List<ActiveRequest> host = new ArrayList<>();
        for (ActiveRequest r : decoding) if (!r.onDevice) host.add(r);
        if (host.isEmpty()) {
            // Only token ids cross: the step and the sampling run on the device (one graph on CUDA with graphs on).
            try {
                model.stepTokensSample(pool, sampler, stepIds, stepNext);
                for (ActiveRequest r : decoding) r.accept(stepNext[r.slot]);
            } catch (MambaException e) {  // a row's logits were NaN/+Inf: the rows cannot be told apart any more
                for (ActiveRequest r : decoding) r.error = e;
            }
        } else {
            model.stepTokens(pool, stepIds, stepLogits);
            sampleAll(host);
            if (host.size() < decoding.size()) {
                try {
                    int[] ids = sampler.sample(stepLogits, paddedVocab);
                    for (ActiveRequest r : decoding) if (r.onDevice) r.accept(ids[r.slot]);
                } catch (MambaException e) {
                    for (ActiveRequest r : decoding) if (r.onDevice) r.error = e;
                }
            }
        }
        for (ActiveRequest r : decoding) emit(r);
    }

    /** Samples every decoding request; on several threads when configured (each request's work is its own). */
    private void sampleAll(List<ActiveRequest> decoding) {
        int vocab = lm.vocabSize();
        if (samplingPool == null || decoding.size() < 2) {
            for (ActiveRequest r : decoding) r.sample(stepLogits, r.slot * paddedVocab, vocab);
            return;
        }
        int parts = Math.min(samplingThreads, decoding.size());
        List<Callable<Void>> tasks = new ArrayList<>(parts);
        for (int p = 0; p < parts; p++) {
            List<ActiveRequest> mine = decoding.subList(p * decoding.size() / parts, (p + 1) * decoding.size() / parts);
            tasks.add(() -> {
                for (ActiveRequest r : mine) r.sample(stepLogits, r.slot * paddedVocab, vocab);
                return null;
            });
        }
        try {
            for (var f : samplingPool.invokeAll(tasks)) f.get();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while sampling", e);
        } catch (ExecutionException e) {
            throw new IllegalStateException("sampling failed", e.getCause());  // sample() keeps its own errors
        }
    }

    /** Hands the last sampled token out; completes and releases the request when it is finished. */
    private void emit(ActiveRequest r) {
        if (r.handle.isDone()) {  // cancelled while sampling
            release(r);
            return;
        }
        if (r.error != null) {
            r.fail(r.error);
            release(r);
            return;
        }
        r.handle.append(new GeneratedToken(r.lastToken, r.lastText));
        try {
            r.listener.onToken(r.lastToken, r.lastText);
        } catch (RuntimeException | Error e) {
            r.fail(e);
            release(r);
            return;
        }
        if (r.finish != null) {
            r.handle.result().complete(r.completion());
            release(r);
        }
    }

    private void release(ActiveRequest r) {
        if (r.slot >= 0 && bySlot[r.slot] == r) {
            bySlot[r.slot] = null;
            activeCount--;
            pool.resetRow(r.slot);  // a free row steps from zeros, never from a stale sequence
        }
        prefill.unpark(r);
    }

    /** Fails whatever is unfinished, frees the states (engine thread, on close or after a fatal error). */
    private void shutDown(Throwable fatal) {
        List<ActiveRequest> unfinished = new ArrayList<>(waiting);
        lock.lock();
        try {
            closed = true;
            if (fatal != null) failure = fatal;
            unfinished.addAll(incoming);
            incoming.clear();
            waitingCount = 0;
        } finally {
            lock.unlock();
        }
        unfinished.addAll(prefilling);
        for (ActiveRequest r : bySlot) if (r != null && !unfinished.contains(r)) unfinished.add(r);
        Throwable why = fatal != null
                ? fatal
                : new GeneratorClosedException("the generator was closed before this request finished");
        for (ActiveRequest r : unfinished) r.fail(why);
        waiting.clear();
        prefilling.clear();
        Arrays.fill(bySlot, null);
        activeCount = 0;
        if (samplingPool != null) samplingPool.shutdownNow();
        try {
            prefill.close();
            pool.close();
            if (sampler != null) sampler.close();
        } catch (RuntimeException e) {
            LOG.log(System.Logger.Level.DEBUG, "closing the generator's states: " + e);
        }
    }

    /**
     * Stops the generator: later {@link #submit} calls throw {@link GeneratorClosedException}, and every request
     * not finished yet (waiting, prefilling or decoding) fails with one. Waits for the engine thread to finish its
     * current step (unless called from a listener, i.e. on the engine thread). Idempotent. The {@code MambaLM} stays
     * open.
     */
    @Override
    public void close() {
        lock.lock();
        try {
            closed = true;
            wake.signal();
        } finally {
            lock.unlock();
        }
        if (Thread.currentThread() == engine) return;
        boolean interrupted = false;
        while (engine.isAlive()) {
            try {
                engine.join();
            } catch (InterruptedException e) {
                interrupted = true;
            }
        }
        if (interrupted) Thread.currentThread().interrupt();
    }

    @Override
    public String toString() {
        return "Generator{" + slots + " slots, " + model.config().getClass().getSimpleName() + '}';
    }

    // ---------------------------------------------------------------- builder

    /** Settings of a {@link Generator}; every one has a default. */
    public static final class Builder {
        private final MambaLM lm;
        private int slots = 8;
        private int prefillChunk = 256;
        private int prefillTokensPerStep = 512;
        private int prefillBatch = 8;
        private int maxPromptTokens = 16_384;
        private int maxNewTokens = 4096;
        private int maxQueued = 1024;
        private int samplingThreads = Math.max(1, Math.min(4, Runtime.getRuntime().availableProcessors() / 2));
        private boolean deviceSampling;

        private Builder(MambaLM lm) {
            this.lm = Objects.requireNonNull(lm, "lm");
            this.deviceSampling = lm.deviceSampling();
        }

        /** Rows of the pool state: the most requests decoding at once (default 8). */
        public Builder slots(int n) { slots = positive("slots", n); return this; }

        /** The most prompt tokens of one request prefilled per iteration (default 256). */
        public Builder prefillChunk(int n) { prefillChunk = positive("prefillChunk", n); return this; }

        /**
         * The prompt tokens prefilled per iteration over all requests (default 512; at least one chunk always runs):
         * higher favours the time to first token, lower the pace of requests already decoding.
         */
        public Builder prefillTokensPerStep(int n) { prefillTokensPerStep = positive("prefillTokensPerStep", n); return this; }

        /** The most requests prefilled in one call (default 8; rounded down to a power of two). */
        public Builder prefillBatch(int n) { prefillBatch = positive("prefillBatch", n); return this; }

        /** Longer prompts are refused (default 16384 tokens). */
        public Builder maxPromptTokens(int n) { maxPromptTokens = positive("maxPromptTokens", n); return this; }

        /** Requests asking for more new tokens are refused (default 4096). */
        public Builder maxNewTokens(int n) { maxNewTokens = positive("maxNewTokens", n); return this; }

        /** Submissions beyond this many requests waiting for a slot are refused (default 1024). */
        public Builder maxQueued(int n) { maxQueued = positive("maxQueued", n); return this; }

        /**
         * Threads that sample the decoding requests' next tokens on the host (default: half the processors, 1 to 4):
         * used with {@code deviceSampling(false)} and for each request's first token.
         */
        public Builder samplingThreads(int n) { samplingThreads = positive("samplingThreads", n); return this; }

        /**
         * Whether decode steps sample on the model's device (default: the language model's {@link MambaLM#deviceSampling()},
         * on unless switched off there): only token ids cross, and the tokens are
         * those of host sampling (the same rule and arithmetic, {@link TokenSampler}). The first token of each request
         * is sampled on the host from its prefill's logits either way. A NaN/+Inf row then fails every request of that
         * step (the host path fails only its own request).
         */
        public Builder deviceSampling(boolean on) { deviceSampling = on; return this; }

        /** Starts the engine thread. */
        public Generator build() {
            if (lm.model().isClosed()) throw new IllegalStateException("the language model is closed");
            return new Generator(this);
        }

        private static int positive(String name, int n) {
            if (n < 1) throw new IllegalArgumentException(name + " must be >= 1, got " + n);
            return n;
        }
    }
}
