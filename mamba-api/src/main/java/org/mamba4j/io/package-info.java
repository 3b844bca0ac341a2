/**
 * Reading and writing model checkpoints in the safetensors format.
 *
 * <p>A safetensors file is an 8-byte little-endian unsigned header length {@code N}, then {@code N}
 * bytes of UTF-8 JSON, then the data region. The JSON object maps each tensor name to
 * {@code {"dtype": ..., "shape": [...], "data_offsets": [begin, end]}}, offsets relative to the data
 * region, plus an optional {@code "__metadata__"} object of strings.
 *
 * <p>{@link org.mamba4j.io.SafeTensorsFile} treats every file as untrusted: the header is capped at
 * {@link org.mamba4j.io.SafeTensors#MAX_HEADER_BYTES}, and every field, shape and byte range is checked
 * before any tensor data is read, with failures reported as {@link org.mamba4j.CheckpointException}.
 * {@link org.mamba4j.io.SafeTensors#write} replaces files atomically.
 */
package org.mamba4j.io;
