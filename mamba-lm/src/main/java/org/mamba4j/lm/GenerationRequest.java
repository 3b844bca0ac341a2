package org.mamba4j.lm;

import java.util.Arrays;
import java.util.List;
import java.util.Objects;

/**
 * What to generate: a prompt (token ids, or text for a model with a tokenizer), a {@link Sampling} (temperature,
 * filters, seed, {@code maxNewTokens}, stop tokens), optional stop strings and an optional per-token listener.
 * An immutable value; each {@code with}-style method returns a copy.
 *
 * <pre>{@code
 * GenerationRequest r = GenerationRequest.ofText("Once upon a time", Sampling.ofTemperature(0.8).seed(7).maxNewTokens(64))
 *         .stopStrings("\n\n")
 *         .listener((token, text) -> System.out.print(text));
 * }</pre>
 */
public final class GenerationRequest {
    private final int[] promptIds;      // exactly one of promptIds, promptText is set
    private final String promptText;
    private final Sampling sampling;
    private final List<String> stopStrings;
    private final GenerationListener listener;

    private GenerationRequest(int[] promptIds, String promptText, Sampling sampling, List<String> stopStrings,
                              GenerationListener listener) {
        this.promptIds = promptIds;
        this.promptText = promptText;
        this.sampling = Objects.requireNonNull(sampling, "sampling");
        this.stopStrings = stopStrings;
        this.listener = Objects.requireNonNull(listener, "listener");
    }

    /** A prompt of token ids (copied). */
    public static GenerationRequest ofTokens(int[] promptIds, Sampling sampling) {
        Objects.requireNonNull(promptIds, "promptIds");
        return new GenerationRequest(promptIds.clone(), null, sampling, List.of(), GenerationListener.NONE);
    }

    /**
     * A text prompt, tokenized with the model's tokenizer when submitted; the tokenizer's end-of-text token is then
     * a stop token too (as in {@link MambaLM#generate(String, Sampling, java.util.function.Consumer)}).
     */
    public static GenerationRequest ofText(String prompt, Sampling sampling) {
        Objects.requireNonNull(prompt, "prompt");
        return new GenerationRequest(null, prompt, sampling, List.of(), GenerationListener.NONE);
    }

    /** A copy with this per-token listener (replaces the previous one). */
    public GenerationRequest listener(GenerationListener listener) {
        return new GenerationRequest(promptIds, promptText, sampling, stopStrings, listener);
    }

    /** A copy with this sampling. */
    public GenerationRequest sampling(Sampling sampling) {
        return new GenerationRequest(promptIds, promptText, sampling, stopStrings, listener);
    }

    /**
     * A copy that stops as soon as the generated text contains one of these strings (OpenAI's {@code stop}); the
     * text is cut before it. Needs a tokenizer. No strings clears them.
     *
     * @throws IllegalArgumentException when a string is null or empty
     */
    public GenerationRequest stopStrings(String... stops) {
        Objects.requireNonNull(stops, "stops");
        for (int i = 0; i < stops.length; i++)
            if (stops[i] == null || stops[i].isEmpty())
                throw new IllegalArgumentException("stop string " + i + " is " + (stops[i] == null ? "null" : "empty"));
        return new GenerationRequest(promptIds, promptText, sampling, List.copyOf(Arrays.asList(stops)), listener);
    }

    /** The prompt's token ids (a copy), or null for a text prompt. */
    public int[] promptIds() { return promptIds == null ? null : promptIds.clone(); }
    /** The prompt text, or null for a token prompt. */
    public String promptText() { return promptText; }
    public Sampling sampling() { return sampling; }
    public List<String> stopStrings() { return stopStrings; }
    public GenerationListener listener() { return listener; }

    /** The ids without a copy, for the generator. */
    int[] idsUnsafe() { return promptIds; }
}
