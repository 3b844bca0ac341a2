package org.mamba4j;

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.Objects;
import org.bytedeco.javacpp.Pointer;

/**
 * An owning buffer on a {@link Device} with a {@link DType} and a shape — device memory for CUDA
 * devices, host memory for the CPU. Use it to keep model inputs/outputs on the GPU
 * ({@link MambaModel#step(MambaState, Tensor, Tensor)} makes no host copies) and to hand buffers to other
 * native code: {@link #pointer()} is a JavaCPP view usable with the bytedeco CUDA presets.
 * Float copies need an F32 tensor; byte copies work for any dtype (whole 4-byte words).
 * An allocation the device cannot satisfy throws {@link OutOfDeviceMemoryException}; nothing leaks and
 * later allocations work. Use after {@link #close()} throws {@link IllegalStateException}; calls on one
 * tensor are serialised, and closing is idempotent and thread-safe. <b>Threads:</b> a tensor has its own device
 * context, and every copy completes before it returns, so a tensor filled on one thread can be read by a model
 * stepped on another; do not write a tensor while a model call that reads it is running.
 */
public final class Tensor implements AutoCloseable {
    private final org.mamba4j.nativ.Tensor peer;
    private final Device device;
    private final DType dtype;
    private final long[] shape;
    private final NativeGuard guard;

    private Tensor(Device device, DType dtype, long[] shape) {
        Native.load();
        this.device = device;
        this.dtype = dtype;
        this.shape = shape.clone();
        this.peer = NativeGuard.call(() -> new org.mamba4j.nativ.Tensor(device.code(), dtype.code, this.shape, this.shape.length));
        this.guard = NativeGuard.of("Tensor", peer::close);
        guard.watch(this);
    }

    /** A zero-filled tensor. */
    public static Tensor allocate(Device device, DType dtype, long... shape) {
        Objects.requireNonNull(device, "device");
        Objects.requireNonNull(dtype, "dtype");
        for (long d : shape) if (d < 0) throw new IllegalArgumentException("negative dimension in " + Arrays.toString(shape));
        return new Tensor(device, dtype, shape);
    }

    /** An F32 tensor holding a copy of {@code data} (its length must be the shape's product). */
    public static Tensor of(Device device, float[] data, long... shape) {
        Tensor t = allocate(device, DType.F32, shape);
        try {
            t.copyFrom(data);
            return t;
        } catch (RuntimeException e) {
            t.close();
            throw e;
        }
    }

    public Device device() { return device; }
    public DType dtype() { return dtype; }
    public long[] shape() { return shape.clone(); }
    /** Number of elements. */
    public long size() { return guard.get(peer::size); }
    /** Size in bytes. */
    public long bytes() { return guard.get(peer::bytes); }

    /** Copies {@code src} (F32 tensors; length = {@link #size()}) into the tensor. */
    public void copyFrom(float[] src) {
        checkFloat();
        Objects.requireNonNull(src, "src");
        Checks.length("src", src.length, size());
        guard.run(() -> peer.copyFromHost(src, src.length));
    }

    /** Copies the tensor (F32) into {@code dst} (length = {@link #size()}). */
    public void copyTo(float[] dst) {
        checkFloat();
        Objects.requireNonNull(dst, "dst");
        Checks.length("dst", dst.length, size());
        guard.run(() -> peer.copyToHost(dst, dst.length));
    }

    /** A new array with the tensor's values (F32). */
    public float[] toArray() {
        float[] out = new float[Math.toIntExact(size())];
        copyTo(out);
        return out;
    }

    /** Copies raw bytes from a direct buffer (remaining() = {@link #bytes()}), for any dtype. */
    public void copyFrom(ByteBuffer src) {
        requireDirect(src);
        guard.run(() -> peer.copyFromHostBytes(new Pointer(src), src.remaining()));
    }

    /** Copies raw bytes into a direct buffer (remaining() = {@link #bytes()}), for any dtype. */
    public void copyTo(ByteBuffer dst) {
        requireDirect(dst);
        guard.run(() -> peer.copyToHostBytes(new Pointer(dst), dst.remaining()));
    }

    /**
     * A JavaCPP view of the buffer (address and capacity in bytes) for interop, e.g. with
     * {@code org.bytedeco.cuda}; it does not own the memory and is valid until this tensor is closed.
     */
    public Pointer pointer() {
        return guard.get(() -> peer.data().capacity(peer.bytes()));
    }

    public boolean isClosed() {
        return guard.isClosed();
    }

    /**
     * Frees the buffer; waits for a call in progress. Idempotent and thread-safe. Required: a tensor dropped
     * without it is freed only after a garbage collection, at no predictable time.
     */
    @Override
    public void close() {
        guard.close();
    }

    @Override
    public String toString() {
        return "Tensor" + Arrays.toString(shape) + " " + dtype + " on " + device;
    }

    /** The peer, for native calls made under {@link #guard()}. */
    org.mamba4j.nativ.Tensor peer() {
        guard.checkOpen();
        return peer;
    }

    /** The guard a model's tensor step takes along with its own. */
    NativeGuard guard() {
        return guard;
    }

    private void checkFloat() {
        if (dtype != DType.F32 && dtype != DType.TF32)
            throw new IllegalArgumentException("float copies need an F32 tensor; this one is " + dtype + " (use byte copies)");
    }

    private void requireDirect(ByteBuffer b) {
        if (b == null || !b.isDirect()) throw new IllegalArgumentException("a direct ByteBuffer is required");
        Checks.length("buffer bytes", b.remaining(), bytes());
    }
}
