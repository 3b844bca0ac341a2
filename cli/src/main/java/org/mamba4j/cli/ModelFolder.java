package org.mamba4j.cli;

import java.nio.file.Files;
import java.nio.file.Path;

/** The one check (and the one wording) for a --model folder, shared by every command that takes one. */
final class ModelFolder {
    static final String HOW_TO_GET_ONE =
            "download one with: huggingface-cli download state-spaces/mamba-130m-hf --local-dir mamba-130m-hf";

    private ModelFolder() {}

    /** Returns {@code dir} if it is a folder holding config.json, else throws with the same message for every command. */
    static Path require(Path dir) {
        if (!Files.isDirectory(dir)) throw new IllegalArgumentException("model folder not found: " + dir + " (" + HOW_TO_GET_ONE + ")");
        if (!Files.isRegularFile(dir.resolve("config.json")))
            throw new IllegalArgumentException("not a model folder (no config.json): " + dir + " (" + HOW_TO_GET_ONE + ")");
        return dir;
    }
}
