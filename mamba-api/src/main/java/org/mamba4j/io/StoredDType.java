package org.mamba4j.io;

import java.util.Optional;

/**
 * Element types a safetensors file can declare, with their on-disk width and the exact spelling used
 * in the header's {@code "dtype"} field. Only whole-byte types are listed, so every tensor's byte size
 * is {@code elementCount * byteSize()}.
 */
public enum StoredDType {
    /** IEEE 754 binary64. */
    F64(8, "F64"),
    /** IEEE 754 binary32. */
    F32(4, "F32"),
    /** IEEE 754 binary16 (half precision). */
    F16(2, "F16"),
    /** bfloat16: the upper 16 bits of a binary32. */
    BF16(2, "BF16"),
    /** 8-bit float, 4 exponent and 3 mantissa bits. */
    F8_E4M3(1, "F8_E4M3"),
    /** 8-bit float, 5 exponent and 2 mantissa bits. */
    F8_E5M2(1, "F8_E5M2"),
    /** Signed 64-bit integer. */
    I64(8, "I64"),
    /** Signed 32-bit integer. */
    I32(4, "I32"),
    /** Signed 16-bit integer. */
    I16(2, "I16"),
    /** Signed 8-bit integer. */
    I8(1, "I8"),
    /** Unsigned 64-bit integer. */
    U64(8, "U64"),
    /** Unsigned 32-bit integer. */
    U32(4, "U32"),
    /** Unsigned 16-bit integer. */
    U16(2, "U16"),
    /** Unsigned 8-bit integer. */
    U8(1, "U8"),
    /** Boolean stored as one byte per element. */
    BOOL(1, "BOOL");

    private final int byteSize;
    private final String safetensorsName;

    StoredDType(int byteSize, String safetensorsName) {
        this.byteSize = byteSize;
        this.safetensorsName = safetensorsName;
    }

    /**
     * Returns the width of one element on disk.
     *
     * @return bytes per element, 1 to 8
     */
    public int byteSize() {
        return byteSize;
    }

    /**
     * Returns the spelling of this type in a safetensors header.
     *
     * @return the {@code "dtype"} string, for example {@code "BF16"}
     */
    public String safetensorsName() {
        return safetensorsName;
    }

    /**
     * Looks up a type by its safetensors spelling; the match is exact and case-sensitive, as in the format.
     *
     * @param name the {@code "dtype"} string from a header
     * @return the type, or empty if the name is unknown
     */
    public static Optional<StoredDType> fromSafetensorsName(String name) {
        for (StoredDType t : values()) {
            if (t.safetensorsName.equals(name)) {
                return Optional.of(t);
            }
        }
        return Optional.empty();
    }
}
