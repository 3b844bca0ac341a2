package org.mamba4j.lm;

import java.util.Arrays;
import org.mamba4j.MambaState;

/**
 * A {@link Generator} request inside the engine: its prompt, where its prefill stands, its slot, its sampler and
 * the tokens and text generated so far. Used by the engine thread only (sampling may run on a helper thread, one
 * request per thread at a time).
 */
final class ActiveRequest {
    final GenerationHandle handle;
    final int[] prompt;
    final Sampling sampling;
    final GenerationListener listener;

    private final TokenSampler sampler;
    private final int[] history;          // prompt, then generated tokens (for the repetition penalty)
    private int generated;
    private final Tokenizer.StreamDecoder decoder;  // null without a tokenizer
    private final StopStrings stops;                // null without stop strings

    int slot = -1;        // row of the pool state, -1 while waiting
    boolean onDevice;     // decodes with the generator's DeviceSampler (its row configured after the first token)
    int prefilled;        // prompt tokens consumed so far
    MambaState parked;    // a one-row state (BatchPrefill's) holding the row between two prefill chunks, null before
                          // the first chunk and after the last

    // the outcome of the last sample(), for emit()
    int lastToken;
    String lastText;
    FinishReason finish;  // non-null when the last token ended the request
    RuntimeException error;

    ActiveRequest(GenerationHandle handle, int[] prompt, Sampling sampling, GenerationListener listener,
                  Tokenizer tokenizer, java.util.List<String> stopStrings) {
        this.handle = handle;
        this.prompt = prompt;
        this.sampling = sampling;
        this.listener = listener;
        this.sampler = new TokenSampler(sampling);  // seeded from sampling.seed(), as MambaLM.generate seeds a row
        this.history = Arrays.copyOf(prompt, prompt.length + sampling.maxNewTokens());
        this.decoder = tokenizer == null ? null : tokenizer.streamDecoder(true);
        this.stops = stopStrings.isEmpty() ? null : new StopStrings(stopStrings);
    }

    boolean prefillDone() { return prefilled == prompt.length; }

    /**
     * Samples the next token from {@code logits[offset, offset + paddedVocab)} (only the real vocabulary is
     * considered, as in {@link MambaLM#generate}), decodes its text and decides whether the request is finished.
     * Never throws: a failure is kept in {@link #error}.
     */
    void sample(float[] logits, int offset, int vocab) {
        try {
            if (handle.logitsLog != null) handle.logitsLog.add(Arrays.copyOfRange(logits, offset, offset + vocab));
            accept(sampler.next(logits, offset, vocab, history, prompt.length + generated));
        } catch (RuntimeException e) {
            error = e;
        }
    }

    /**
     * Takes {@code tok} as the next token (sampled here or on the device), decodes its text and decides whether the
     * request is finished. Never throws: a failure is kept in {@link #error}.
     */
    void accept(int tok) {
        try {
            history[prompt.length + generated++] = tok;
            lastToken = tok;
            boolean stopToken = sampling.isStopToken(tok);
            boolean full = generated == sampling.maxNewTokens();
            String text = decoder == null ? "" : decoder.push(tok);
            if (decoder != null && (stopToken || full)) text += decoder.flush();
            if (stops != null) {
                text = stops.push(text);
                if (!stops.stopped() && (stopToken || full)) text += stops.flush();
            }
            lastText = text;
            finish = stopToken || (stops != null && stops.stopped()) ? FinishReason.STOP : full ? FinishReason.LENGTH : null;
        } catch (RuntimeException e) {
            error = e;
        }
    }

    /** The host sampler's random state (to continue the stream on the device). */
    long randomState() { return sampler.randomState(); }

    /** The prompt and the tokens generated so far (the repetition penalty's history). */
    int[] historySoFar() { return Arrays.copyOf(history, prompt.length + generated); }

    /** The input of the next decode step: the token just sampled. */
    int nextInput() { return lastToken; }

    /** The finished result (after a {@link #finish}). */
    Completion completion() {
        String text = stops != null ? stops.text() : decoder != null ? decoder.text() : "";
        return new Completion(Arrays.copyOfRange(history, prompt.length, prompt.length + generated), text, finish,
                prompt.length);
    }

    /** Fails the request unless it already finished (e.g. cancelled). */
    void fail(Throwable t) {
        handle.result().completeExceptionally(t);
    }
}
