package org.mamba4j.cli;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.mamba4j.Mamba1Config;
import org.mamba4j.Mamba3Config;
import org.mamba4j.MambaModel;
import org.mamba4j.io.SafeTensors;
import org.mamba4j.lm.MambaLM;

/** Tiny model folders for the CLI tests (Mamba-1 HuggingFace layout, Mamba-3 official layout): config.json, model.safetensors, optionally a tokenizer. */
final class TinyModelFolder {
    private TinyModelFolder() {}

    /** Writes the folder {@code dir} (d_model 16, 2 layers, vocabulary 8) and returns it. */
    static Path write(Path dir, boolean withTokenizer) throws IOException {
        Files.createDirectories(dir);
        Files.writeString(dir.resolve("config.json"), "{\"model_type\": \"mamba\", \"hidden_size\": 16, \"state_size\": 4,"
                + " \"num_hidden_layers\": 2, \"expand\": 2, \"conv_kernel\": 4, \"time_step_rank\": \"auto\", \"vocab_size\": 8,"
                + " \"use_bias\": false, \"layer_norm_epsilon\": 1e-5}");
        List<SafeTensors.Entry> tensors = new ArrayList<>();
        try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(16).dState(4).layers(2).build()).vocabSize(8).seed(3).build()) {
            for (String n : m.parameterNames()) tensors.add(new SafeTensors.Entry(n, m.parameterShape(n), m.getParameter(n)));
        }
        SafeTensors.write(dir.resolve("model.safetensors"), Map.of("format", "pt"), tensors);
        if (withTokenizer) writeTokenizer(dir);
        return dir;
    }

    /**
     * Writes a tiny Mamba-3 folder in the official state-spaces layout into {@code dir} (d_model 16, 2 layers, d_state 8,
     * headdim 8, vocabulary 8) and returns it.
     */
    static Path writeMamba3(Path dir, boolean withTokenizer) throws IOException {
        Mamba3Config config = Mamba3Config.builder().dModel(16).layers(2).dState(8).headdim(8).build();
        try (MambaLM lm = new MambaLM(MambaModel.builder(config).vocabSize(8).seed(3).build(), 8, null)) {
            lm.saveOfficial(dir);
        }
        if (withTokenizer) writeTokenizer(dir);
        return dir;
    }

    private static void writeTokenizer(Path dir) throws IOException {
        // a word-level tokenizer over the same 8 ids
        Files.writeString(dir.resolve("tokenizer.json"), "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,"
                    + " \"added_tokens\": [{\"id\": 0, \"content\": \"<|endoftext|>\", \"single_word\": false, \"lstrip\": false,"
                    + " \"rstrip\": false, \"normalized\": false, \"special\": true}], \"normalizer\": null,"
                    + " \"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"post_processor\": null, \"decoder\": null,"
                    + " \"model\": {\"type\": \"WordLevel\", \"unk_token\": \"<unk>\", \"vocab\": {\"<|endoftext|>\": 0, \"hello\": 1,"
                    + " \"world\": 2, \"mamba\": 3, \"snake\": 4, \"fast\": 5, \"java\": 6, \"<unk>\": 7}}}");
    }
}
