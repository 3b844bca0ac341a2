package org.mamba4j.lm;

/**
 * The finished result of one {@link Generator} request.
 *
 * <p>{@link #tokens()} are all generated tokens, a stop token included (as {@link MambaLM#generate} returns them).
 * {@link #text()} is their text, cut before a stop string when one was hit; empty when the model has no tokenizer.
 */
public final class Completion {
    private final int[] tokens;
    private final String text;
    private final FinishReason finishReason;
    private final int promptTokens;

    Completion(int[] tokens, String text, FinishReason finishReason, int promptTokens) {
        this.tokens = tokens;
        this.text = text;
        this.finishReason = finishReason;
        this.promptTokens = promptTokens;
    }

    /** A copy of the generated token ids. */
    public int[] tokens() { return tokens.clone(); }
    /** Number of generated tokens. */
    public int tokenCount() { return tokens.length; }
    /** The generated text (empty without a tokenizer). */
    public String text() { return text; }
    /** Why generation ended. */
    public FinishReason finishReason() { return finishReason; }
    /** Number of prompt tokens (after tokenization for text prompts). */
    public int promptTokens() { return promptTokens; }

    @Override
    public String toString() {
        return "Completion{" + tokens.length + " tokens, " + finishReason + ", prompt " + promptTokens + " tokens}";
    }
}
