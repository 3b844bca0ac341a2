package org.mamba4j.lm;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.NoSuchElementException;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;

/**
 * A request submitted to a {@link Generator}: its {@link #result() future}, its tokens as a blocking stream
 * ({@link #iterator()}), and {@link #cancel()}.
 *
 * <p>Thread-safe. Any number of iterators may read the tokens, each from the first one.
 */
public final class GenerationHandle implements Iterable<GeneratedToken> {
    private final CompletableFuture<Completion> result = new CompletableFuture<>();
    private final List<GeneratedToken> tokens = new ArrayList<>();  // guarded by this
    private final int promptTokens;
    /** Test hook: when not null, the engine adds the logits each token was sampled from (real vocabulary). */
    final List<float[]> logitsLog;

    GenerationHandle(int promptTokens, boolean logLogits) {
        this.promptTokens = promptTokens;
        this.logitsLog = logLogits ? new ArrayList<>() : null;
        result.whenComplete((r, e) -> wakeReaders());  // also when a user cancels or completes the future
    }

    /**
     * The whole completion. Completes exceptionally with {@link GeneratorClosedException} when the generator is
     * closed first, with the listener's exception when the listener threw, or with the model's or sampler's error;
     * it is cancelled by {@link #cancel()}. Cancelling this future cancels the request too.
     */
    public CompletableFuture<Completion> result() {
        return result;
    }

    /**
     * Stops generating for this request: its slot is freed before the next decode step and {@link #result()} is
     * cancelled. Returns false when the request had already finished.
     */
    public boolean cancel() {
        return result.cancel(false);
    }

    /** Whether the request finished in any way (completed, failed, cancelled). */
    public boolean isDone() {
        return result.isDone();
    }

    /** Number of prompt tokens (after tokenization). */
    public int promptTokens() {
        return promptTokens;
    }

    /** The tokens generated so far (a snapshot). */
    public synchronized List<GeneratedToken> tokensSoFar() {
        return List.copyOf(tokens);
    }

    /**
     * The tokens from the first one, blocking in {@code hasNext()} until the next token or the end. When the request
     * failed or was cancelled, {@code hasNext()} throws that failure ({@link CancellationException}, or a {@link
     * CompletionException} around the cause) once the tokens generated before it are read.
     */
    @Override
    public Iterator<GeneratedToken> iterator() {
        return new Iterator<>() {
            private int next;

            @Override
            public boolean hasNext() {
                synchronized (GenerationHandle.this) {
                    while (next == tokens.size() && !result.isDone()) {
                        try {
                            GenerationHandle.this.wait();
                        } catch (InterruptedException e) {
                            Thread.currentThread().interrupt();
                            throw new CancellationException("interrupted while waiting for the next token");
                        }
                    }
                    if (next < tokens.size()) return true;
                }
                rethrowFailure();
                return false;
            }

            @Override
            public GeneratedToken next() {
                if (!hasNext()) throw new NoSuchElementException();
                synchronized (GenerationHandle.this) {
                    return tokens.get(next++);
                }
            }
        };
    }

    private void rethrowFailure() {
        if (!result.isCompletedExceptionally()) return;
        try {
            result.get();
        } catch (CancellationException e) {
            throw e;
        } catch (ExecutionException e) {
            throw new CompletionException(e.getCause());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new CancellationException("interrupted");
        }
    }

    /** Adds a token for the readers (engine thread). */
    synchronized void append(GeneratedToken token) {
        tokens.add(token);
        notifyAll();
    }

    private synchronized void wakeReaders() {
        notifyAll();
    }

    @Override
    public String toString() {
        return "GenerationHandle{prompt " + promptTokens + " tokens, " + (result.isDone() ? "done" : "running") + '}';
    }
}
