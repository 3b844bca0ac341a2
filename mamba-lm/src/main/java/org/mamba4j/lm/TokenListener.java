package org.mamba4j.lm;

/** Receives each generated token as soon as it is sampled (row = index of the prompt in a batch). */
@FunctionalInterface
public interface TokenListener {
    TokenListener NONE = (row, token) -> {};

    void onToken(int row, int token);
}
