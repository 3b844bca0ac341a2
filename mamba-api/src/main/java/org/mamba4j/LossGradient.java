package org.mamba4j;

/**
 * A loss value and its gradient with respect to the outputs it was computed from.
 *
 * @param loss     the loss
 * @param gradient ∂loss/∂outputs, shaped like the outputs (pass it to {@link Trainer#backward})
 */
public record LossGradient(double loss, float[] gradient) {}
