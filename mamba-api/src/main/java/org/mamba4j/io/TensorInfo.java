package org.mamba4j.io;

import java.util.Arrays;
import java.util.Objects;

/**
 * One tensor entry of a safetensors header: its name, element type, shape and byte range.
 *
 * <p>{@code begin} and {@code end} are offsets relative to the start of the data region (the byte after
 * the JSON header), {@code end} exclusive. The constructor enforces the same invariants the reader
 * checks, so an instance always describes a consistent range. The shape array is copied on the way in
 * and out, so instances are immutable.
 *
 * @param name  tensor name, non-empty
 * @param dtype element type on disk
 * @param shape dimensions, each {@code >= 0}; empty for a scalar
 * @param begin first byte, relative to the data region
 * @param end   one past the last byte, relative to the data region
 */
public record TensorInfo(String name, StoredDType dtype, long[] shape, long begin, long end) {

    /**
     * Validates and copies the components.
     *
     * @throws IllegalArgumentException if the name is empty, a dimension is negative, the range is
     *     reversed or negative, or its length does not equal the element count times the element width
     */
    public TensorInfo {
        Objects.requireNonNull(name, "name");
        Objects.requireNonNull(dtype, "dtype");
        shape = Objects.requireNonNull(shape, "shape").clone();
        if (name.isEmpty()) {
            throw new IllegalArgumentException("tensor name is empty");
        }
        if (begin < 0 || begin > end) {
            throw new IllegalArgumentException("tensor '" + name + "' has invalid range [" + begin + ", " + end + ")");
        }
        long bytes;
        try {
            bytes = Math.multiplyExact(product(name, shape), dtype.byteSize());
        } catch (ArithmeticException e) {
            throw new IllegalArgumentException("tensor '" + name + "' shape " + Arrays.toString(shape) + " overflows", e);
        }
        if (bytes != end - begin) {
            throw new IllegalArgumentException("tensor '" + name + "' range holds " + (end - begin)
                    + " bytes but shape " + Arrays.toString(shape) + " of " + dtype + " needs " + bytes);
        }
    }

    /**
     * Returns a copy of the dimensions.
     *
     * @return the shape; empty for a scalar
     */
    @Override
    public long[] shape() {
        return shape.clone();
    }

    /**
     * Returns the number of dimensions.
     *
     * @return 0 for a scalar
     */
    public int rank() {
        return shape.length;
    }

    /**
     * Returns the number of elements, the product of the dimensions (1 for a scalar).
     *
     * @return element count; cannot overflow because the constructor checked it
     */
    public long elementCount() {
        return product(name, shape);
    }

    /**
     * Returns the length of the tensor's byte range.
     *
     * @return {@code end - begin}
     */
    public long byteSize() {
        return end - begin;
    }

    private static long product(String name, long[] shape) {
        long n = 1;
        for (long d : shape) {
            if (d < 0) {
                throw new IllegalArgumentException("tensor '" + name + "' has negative dimension " + d);
            }
            n = Math.multiplyExact(n, d);
        }
        return n;
    }

    /**
     * Compares by value, including the shape's contents.
     *
     * @param o the other object
     * @return true if every component is equal
     */
    @Override
    public boolean equals(Object o) {
        return o instanceof TensorInfo t
                && name.equals(t.name)
                && dtype == t.dtype
                && Arrays.equals(shape, t.shape)
                && begin == t.begin
                && end == t.end;
    }

    /**
     * Hashes by value, consistent with {@link #equals(Object)}.
     *
     * @return the hash code
     */
    @Override
    public int hashCode() {
        return Objects.hash(name, dtype, Arrays.hashCode(shape), begin, end);
    }

    /**
     * Describes the entry, for example {@code TensorInfo[a, F32, [2, 3], 0..24]}.
     *
     * @return a readable description
     */
    @Override
    public String toString() {
        return "TensorInfo[" + name + ", " + dtype + ", " + Arrays.toString(shape) + ", " + begin + ".." + end + "]";
    }
}
