package org.mamba4j;

/** A checkpoint file or folder is missing, truncated, corrupt, hostile or does not match the model. */
public class CheckpointException extends MambaException {
    public CheckpointException(String message) {
        super(message);
    }

    public CheckpointException(String message, Throwable cause) {
        super(message, cause);
    }
}
