package org.mamba4j;

/** A model or training configuration value is out of range; the message names the field and the limit. */
public class InvalidConfigException extends MambaException {
    public InvalidConfigException(String message) {
        super(message);
    }
}
