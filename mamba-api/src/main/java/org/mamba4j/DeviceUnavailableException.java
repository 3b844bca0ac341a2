package org.mamba4j;

/** The requested device does not exist here (for example no CUDA driver or GPU). */
public class DeviceUnavailableException extends MambaException {
    public DeviceUnavailableException(String message) {
        super(message);
    }
}
