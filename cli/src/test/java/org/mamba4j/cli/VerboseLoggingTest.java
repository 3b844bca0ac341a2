package org.mamba4j.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The CLI's logging as a user sees it, in a child JVM (logging is configured once per process): quiet by default
 * with no SLF4J "no providers" warning, and --verbose shows native loading and device selection.
 */
class VerboseLoggingTest {
    @TempDir Path dir;

    private String stderrOf(int exitCode, String... args) throws IOException, InterruptedException {
        List<String> command = new ArrayList<>();
        command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        command.add("--enable-native-access=ALL-UNNAMED");
        for (String key : System.getProperties().stringPropertyNames())
            if (key.startsWith("org.bytedeco.") || key.equals("ENGINE_CACHE_DIR"))  // the natives' caches
                command.add("-D" + key + "=" + System.getProperty(key));
        command.addAll(List.of("-cp", System.getProperty("java.class.path"), MambaCli.class.getName()));
        command.addAll(List.of(args));
        Path err = dir.resolve("stderr.txt");
        Process p = new ProcessBuilder(command).redirectError(err.toFile()).redirectOutput(dir.resolve("stdout.txt").toFile()).start();
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), "CLI finished");
        assertEquals(exitCode, p.exitValue(), "exit code; stderr: " + Files.readString(err));
        return Files.readString(err);
    }

    @Test
    void quietByDefaultAndVerboseOnRequest() throws Exception {
        Path model = dir.resolve("missing");
        // `--device best` probes CUDA (and so loads libmamba) before the folder is checked
        String quiet = stderrOf(1, "convert", "--model", model.toString(), "--output", "x", "--device", "best");
        assertEquals(1, quiet.strip().lines().count(), "one line: " + quiet);
        assertFalse(quiet.contains("SLF4J"), quiet);
        String verbose = stderrOf(1, "convert", "--verbose", "--model", model.toString(), "--output", "x", "--device", "best");
        assertTrue(verbose.contains("[DEBUG] org.mamba4j.Native - loading libmamba for linux-x86_64"), verbose);
        assertTrue(verbose.contains("[DEBUG] org.mamba4j.Native - loaded "), verbose);
        assertTrue(verbose.contains("[DEBUG] org.mamba4j.Device - best device: ") || verbose.contains("[DEBUG] org.mamba4j.Device - cuda:0 is "),
                verbose);
        assertFalse(verbose.contains("SLF4J"), verbose);
    }

    @Test
    void generatingPrintsNoWarnings() throws Exception {
        // the tokenizer's library (DJL) probes for CUDA and would warn on machines without a driver
        Path folder = TinyModelFolder.write(dir.resolve("tiny-tok"), true);
        String err = stderrOf(0, "generate", "--model", folder.toString(), "--prompt", "hello", "-n", "3");
        assertFalse(err.contains("WARN") || err.contains("SLF4J"), err);
        assertTrue(err.contains("loading tiny-tok: 100%"), err);
    }
}
