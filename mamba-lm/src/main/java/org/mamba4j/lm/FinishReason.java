package org.mamba4j.lm;

/** Why a completion ended (the names and meanings of OpenAI's {@code finish_reason}). */
public enum FinishReason {
    /** A stop token (the tokenizer's end-of-text included for text prompts) or a stop string was generated. */
    STOP,
    /** {@link Sampling#maxNewTokens()} tokens were generated. */
    LENGTH
}
