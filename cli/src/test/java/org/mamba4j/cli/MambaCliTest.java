package org.mamba4j.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.Mamba3Config;
import org.mamba4j.MambaModel;
import org.mamba4j.lm.MambaLM;

/** The CLI end to end on a tiny HF-format folder made here (config.json + safetensors, no tokenizer needed for info/convert). */
class MambaCliTest {
    @TempDir static Path dir;
    static Path model;

    @BeforeAll
    static void tinyModel() throws Exception {
        System.setProperty("ENGINE_CACHE_DIR", Path.of("target", "djl-cache").toAbsolutePath().toString());
        model = TinyModelFolder.write(dir.resolve("tiny"), false);
        withTokenizer = TinyModelFolder.write(dir.resolve("tiny-tok"), true);
        mamba3 = TinyModelFolder.writeMamba3(dir.resolve("tiny-m3"), true);
    }

    static Path withTokenizer, mamba3;

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
        assertTrue(out.contains("architecture: mamba1"), out);
    }

    @Test
    void infoDescribesAMamba3Folder() {
        String out = run(0, "info", "--model", mamba3.toString())[0];
        assertTrue(out.contains("Mamba-3"), out);
        assertTrue(out.contains("architecture: mamba3"), out);
        assertTrue(out.contains("d_model:      16"), out);
        assertTrue(out.contains("heads:        4 x headdim 8"), out);
        assertTrue(out.contains("vocab:        8 (padded to 8)"), out);
        assertTrue(out.contains("tokenizer:    tokenizer.json"), out);
        try (MambaLM lm = MambaLM.fromPretrained(mamba3, Device.cpu(), DType.F32)) {
            assertTrue(out.contains(String.format("parameters:   %,d ", lm.model().parameterCount())), out);
        }
    }

    @Test
    void convertHandlesMamba3FoldersBothWays() {
        Path file = dir.resolve("m3.safetensors");
        run(0, "convert", "--model", mamba3.toString(), "--output", file.toString());
        try (MambaModel m = MambaModel.load(file)) {
            assertInstanceOf(Mamba3Config.class, m.config());
            assertEquals(8, m.vocabSize());
        }
        Path official = dir.resolve("m3-official");
        run(0, "convert", "--model", mamba3.toString(), "--output", official.toString(), "--format", "official");
        assertTrue(Files.isRegularFile(official.resolve("tokenizer.json")), "tokenizer copied along");
        try (MambaLM a = MambaLM.fromPretrained(mamba3, Device.cpu(), DType.F32);
             MambaLM b = MambaLM.fromPretrained(official, Device.cpu(), DType.F32)) {
            assertEquals(a.model().config(), b.model().config());
            for (String n : a.model().parameterNames()) assertArrayEquals(a.model().getParameter(n), b.model().getParameter(n), n);
        }
        // a Mamba-1 HuggingFace folder converts into the official state-spaces layout, too
        Path m1 = dir.resolve("m1-official");
        run(0, "convert", "--model", model.toString(), "--output", m1.toString(), "--format", "official");
        assertTrue(run(0, "info", "--model", m1.toString())[0].contains("architecture: mamba1"));
        assertTrue(run(2, "convert", "--model", model.toString(), "--output", m1.toString(), "--format", "onnx")[1]
                .contains("--format must be"));
    }

    /** Generation from a Mamba-3 folder (needs the Mamba-3 forward kernels). */
    @Test
    void generateFromAMamba3Folder() {
        String[] r = run(0, "generate", "--model", mamba3.toString(), "--prompt", "hello world", "-n", "5", "--seed", "2",
                "--temperature", "0.7");
        assertTrue(r[0].startsWith("hello world"), r[0]);
        assertEquals(r[0], run(0, "generate", "--model", mamba3.toString(), "--prompt", "hello world", "-n", "5", "--seed", "2",
                "--temperature", "0.7")[0], "same seed, same text");
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
