package org.mamba4j.parallel;

import org.mamba4j.MambaException;

/**
 * A collective could not complete: a rank died, hung past the timeout, aborted, or called a different collective. The
 * communicator is unusable afterwards (every rank's next call fails too); the process is expected to stop, and the
 * last checkpoint written before the failure is intact (saves are atomic).
 */
public class CommunicatorException extends MambaException {
    public CommunicatorException(String message) {
        super(message);
    }

    public CommunicatorException(String message, Throwable cause) {
        super(message, cause);
    }
}
