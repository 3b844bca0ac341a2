package org.mamba4j.lm;

/**
 * Thrown by {@link Generator#submit} once the generator is closed, and the failure of every request that had not
 * finished when it was closed.
 */
public class GeneratorClosedException extends IllegalStateException {
    private static final long serialVersionUID = 1L;

    public GeneratorClosedException(String message) {
        super(message);
    }

    public GeneratorClosedException(String message, Throwable cause) {
        super(message, cause);
    }
}
