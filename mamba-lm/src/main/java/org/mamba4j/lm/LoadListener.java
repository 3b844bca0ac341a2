package org.mamba4j.lm;

/** Progress of a checkpoint load: called after each tensor with the bytes read so far and in all. */
@FunctionalInterface
public interface LoadListener {
    /** A listener that ignores progress. */
    LoadListener NONE = (tensor, done, total) -> {};

    void loaded(String tensor, long bytesDone, long bytesTotal);
}
