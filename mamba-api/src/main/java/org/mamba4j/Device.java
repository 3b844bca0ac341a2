package org.mamba4j;

import org.mamba4j.nativ.global.libmamba;

/**
 * Where a model's weights and states live: the CPU, or a CUDA GPU by ordinal. Instances are
 * immutable values; {@link #cuda(int)} checks that the GPU exists.
 */
public final class Device {
    private static final System.Logger LOG = System.getLogger(Device.class.getName());
    private static final Device CPU = new Device(-1);
    private final int ordinal;

    private Device(int ordinal) {
        this.ordinal = ordinal;
    }

    /** The host CPU (OpenBLAS + libmamba's vectorised loops). */
    public static Device cpu() {
        return CPU;
    }

    /**
     * CUDA device {@code ordinal}.
     *
     * @throws DeviceUnavailableException if there is no CUDA driver/GPU or no such ordinal
     */
    public static Device cuda(int ordinal) {
        int n = cudaCount();
        if (n == 0) throw new DeviceUnavailableException("no CUDA device: " + cudaUnavailableReason());
        if (ordinal < 0 || ordinal >= n)
            throw new DeviceUnavailableException("no CUDA device " + ordinal + ": " + n + " present");
        Device d = new Device(ordinal);
        LOG.log(System.Logger.Level.DEBUG, () -> "cuda:" + ordinal + " is " + d.name() + " (" + (d.totalMemory() >> 20)
                + " MiB; " + n + " CUDA device(s) present)");
        return d;
    }

    /** The first CUDA device if there is one, else the CPU. */
    public static Device best() {
        if (cudaCount() > 0) return cuda(0);
        LOG.log(System.Logger.Level.DEBUG, () -> "best device: cpu (no CUDA device: " + cudaUnavailableReason() + ")");
        return CPU;
    }

    /** Number of usable CUDA devices; 0 without a driver, a GPU, or CUDA support in this build. */
    public static int cudaCount() {
        Native.load();
        return NativeGuard.call(libmamba::cudaDeviceCount);
    }

    /** Why {@link #cudaCount()} is 0, or an empty string when it is not. */
    public static String cudaUnavailableReason() {
        Native.load();
        return NativeGuard.call(() -> Native.text(libmamba.cudaUnavailableReason()));
    }

    /** True for the CPU. */
    public boolean isCpu() {
        return ordinal < 0;
    }

    /** True for a CUDA device. */
    public boolean isCuda() {
        return ordinal >= 0;
    }

    /** The CUDA ordinal, or -1 for the CPU. */
    public int ordinal() {
        return ordinal;
    }

    /** The GPU's name, or "cpu". */
    public String name() {
        if (isCpu()) return "cpu";
        return NativeGuard.call(() -> libmamba.cudaDeviceName(ordinal).getString());
    }

    /** Total device memory in bytes (the CPU reports the JVM-independent physical size as -1: unknown). */
    public long totalMemory() {
        if (isCpu()) return -1;
        return NativeGuard.call(() -> libmamba.cudaDeviceTotalMemory(ordinal));
    }

    /** Free device memory in bytes right now (-1 for the CPU). */
    public long freeMemory() {
        if (isCpu()) return -1;
        return NativeGuard.call(() -> libmamba.cudaDeviceFreeMemory(ordinal));
    }

    int code() {
        return ordinal;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Device && ((Device) o).ordinal == ordinal;
    }

    @Override
    public int hashCode() {
        return ordinal;
    }

    @Override
    public String toString() {
        return isCpu() ? "cpu" : "cuda:" + ordinal;
    }
}
