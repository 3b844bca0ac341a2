package org.mamba4j.lm;

/**
 * Receives each token of one {@link Generator} request as soon as it is sampled.
 *
 * <p>Called on the generator's engine thread, in token order, never concurrently for one request. Keep it quick:
 * every request of the generator waits while it runs. An exception thrown here fails this request (its future
 * completes with that exception) and frees its slot; the other requests go on.
 */
@FunctionalInterface
public interface GenerationListener {
    GenerationListener NONE = (token, text) -> {};

    /**
     * @param token the sampled token id
     * @param text the text this token completes (possibly empty: a token can be half a character, and text that
     *     might begin a stop string is held back until it is known not to); empty without a tokenizer
     */
    void onToken(int token, String text);
}
