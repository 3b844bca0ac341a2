package org.mamba4j;

/** An allocation on a device failed. Nothing was allocated; the process and the device keep working. */
public class OutOfDeviceMemoryException extends MambaException {
    public OutOfDeviceMemoryException(String message) {
        super(message);
    }
}
