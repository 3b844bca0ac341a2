package org.mamba4j.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Path;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.mamba4j.MambaModel;

/** The CLI end to end on a tiny HF-format folder made here (config.json + safetensors, no tokenizer needed for info/convert). */
class MambaCliTest {
    @TempDir static Path dir;
    static Path model;

    @BeforeAll
    static void tinyModel() throws Exception {
        System.setProperty("ENGINE_CACHE_DIR", Path.of("target", "djl-cache").toAbsolutePath().toString());
        model = TinyModelFolder.write(dir.resolve("tiny"), false);
        withTokenizer = TinyModelFolder.write(dir.resolve("tiny-tok"), true);
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
