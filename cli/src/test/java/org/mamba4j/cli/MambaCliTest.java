package org.mamba4j.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.io.SafeTensors;

/** The CLI end to end on a tiny HF-format folder made here (config.json + safetensors, no tokenizer needed for info/convert). */
class MambaCliTest {
    @TempDir static Path dir;
    static Path model;

    @BeforeAll
    static void tinyModel() throws Exception {
        System.setProperty("ENGINE_CACHE_DIR", Path.of("target", "djl-cache").toAbsolutePath().toString());
        model = dir.resolve("tiny");
        Files.createDirectories(model);
        Files.writeString(model.resolve("config.json"), "{\"model_type\": \"mamba\", \"hidden_size\": 16, \"state_size\": 4,"
                + " \"num_hidden_layers\": 2, \"expand\": 2, \"conv_kernel\": 4, \"time_step_rank\": \"auto\", \"vocab_size\": 8,"
                + " \"use_bias\": false, \"layer_norm_epsilon\": 1e-5}");
        List<SafeTensors.Entry> tensors = new ArrayList<>();
        try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(16).dState(4).layers(2).build()).vocabSize(8).seed(3).build()) {
            for (String n : m.parameterNames()) tensors.add(new SafeTensors.Entry(n, m.parameterShape(n), m.getParameter(n)));
        }
        SafeTensors.write(model.resolve("model.safetensors"), Map.of("format", "pt"), tensors);
        // A word-level tokenizer over the same 8 ids, in a copy of the folder.
        withTokenizer = dir.resolve("tiny-tok");
        Files.createDirectories(withTokenizer);
        Files.copy(model.resolve("config.json"), withTokenizer.resolve("config.json"));
        Files.copy(model.resolve("model.safetensors"), withTokenizer.resolve("model.safetensors"));
        Files.writeString(withTokenizer.resolve("tokenizer.json"), "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,"
                + " \"added_tokens\": [{\"id\": 0, \"content\": \"<|endoftext|>\", \"single_word\": false, \"lstrip\": false,"
                + " \"rstrip\": false, \"normalized\": false, \"special\": true}], \"normalizer\": null,"
                + " \"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"post_processor\": null, \"decoder\": null,"
                + " \"model\": {\"type\": \"WordLevel\", \"unk_token\": \"<unk>\", \"vocab\": {\"<|endoftext|>\": 0, \"hello\": 1,"
                + " \"world\": 2, \"mamba\": 3, \"snake\": 4, \"fast\": 5, \"java\": 6, \"<unk>\": 7}}}");
    }

    static Path withTokenizer;

    @Test
    void generateStreamsTextFromAFolder() {
        String[] r = run(0, "generate", "--model", withTokenizer.toString(), "--prompt", "hello world", "-n", "6",
                "--temperature", "0.8", "--seed", "5");
        assertTrue(r[0].startsWith("hello world"), r[0]);
        assertTrue(r[1].contains("100%") && r[1].contains("cpu"), r[1]);
        String again = run(0, "generate", "--model", withTokenizer.toString(), "--prompt", "hello world", "-n", "6",
                "--temperature", "0.8", "--seed", "5")[0];
        assertEquals(r[0], again, "same seed, same text");
    }

    private static String[] run(int expectedExit, String... args) {
        StringWriter out = new StringWriter(), err = new StringWriter();
        int code = MambaCli.run(args, new PrintWriter(out, true), new PrintWriter(err, true));
        assertEquals(expectedExit, code, "exit code of " + String.join(" ", args) + "; stderr: " + err);
        return new String[] {out.toString(), err.toString()};
    }

    @Test
    void infoDescribesTheFolder() {
        String out = run(0, "info", "--model", model.toString())[0];
        assertTrue(out.contains("d_model:      16"), out);
        assertTrue(out.contains("vocab:        8"), out);
    }

    @Test
    void convertWritesALoadableCheckpoint() {
        Path file = dir.resolve("tiny.safetensors");
        String[] r = run(0, "convert", "--model", model.toString(), "--output", file.toString());
        assertTrue(r[0].contains("wrote"), r[0]);
        assertTrue(r[1].contains("100%"), "progress bar: " + r[1]);
        try (MambaModel m = MambaModel.load(file)) {
            assertEquals(8, m.vocabSize());
        }
    }

    @Test
    void badInputEndsWithOneClearLine() {
        String err = run(1, "info", "--model", dir.resolve("nope").toString())[1];
        assertEquals(1, err.strip().lines().count(), err);
        assertTrue(err.startsWith("mamba4j: "), err);
        String usage = run(2, "generate", "--model", model.toString(), "--prompt", "x", "--device", "tpu")[1];
        assertTrue(usage.contains("--device must be"), usage);
        String noTokenizer = run(1, "generate", "--model", model.toString(), "--prompt", "x")[1];
        assertTrue(noTokenizer.contains("tokenizer"), noTokenizer);
        assertTrue(run(2, "generate", "--model", model.toString(), "--prompt", "x", "--top-p", "2")[1].contains("topP"));
    }

    @Test
    void aMissingFolderReadsTheSameInEveryCommand() {
        String missing = dir.resolve("nope").toString();
        String info = run(1, "info", "--model", missing)[1];
        String generate = run(1, "generate", "--model", missing, "--prompt", "x")[1];
        String convert = run(1, "convert", "--model", missing, "--output", dir.resolve("x.safetensors").toString())[1];
        assertEquals(info, generate);
        assertEquals(info, convert);
        assertTrue(info.startsWith("mamba4j: model folder not found: " + missing), info);
        assertTrue(info.contains("huggingface-cli download state-spaces/mamba-130m-hf"), "says how to get one: " + info);
    }

    @Test
    void versionIsTheProjectVersion() {
        String out = run(0, "--version")[0];
        assertTrue(out.matches("(?s)mamba4j \\d+\\.\\d+\\.\\d+(-SNAPSHOT)?\\R.*"), out);
        assertEquals(out, run(0, "info", "--version")[0], "subcommands print the same version");
    }

    @Test
    void progressIsPlainWhenNotATerminal() {
        // the tests' stderr is not a terminal: one plain line, no carriage returns or escape sequences
        String err = run(0, "convert", "--model", model.toString(), "--output", dir.resolve("plain.safetensors").toString())[1];
        assertTrue(err.contains("loading tiny: 100%"), err);
        assertTrue(err.indexOf('\r') < 0 && err.indexOf('\u001b') < 0, "no \\r or ESC: " + err.replace("\r", "\\r"));
    }

    @Test
    void helpReadsWell() {
        String out = run(0, "--help")[0];
        assertTrue(out.contains("generate") && out.contains("convert") && out.contains("info"), out);
        String gen = run(0, "generate", "--help")[0];
        assertTrue(gen.contains("--temperature") && gen.contains("--top-p") && gen.contains("--seed"), gen);
    }
}
