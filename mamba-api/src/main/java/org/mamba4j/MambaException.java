package org.mamba4j;

/**
 * Base of every exception mamba4j throws on purpose. Unchecked: a bad shape or a corrupt file is a
 * programming or data error, not a condition callers are expected to recover from inline.
 */
public class MambaException extends RuntimeException {
    public MambaException(String message) {
        super(message);
    }

    public MambaException(String message, Throwable cause) {
        super(message, cause);
    }
}
