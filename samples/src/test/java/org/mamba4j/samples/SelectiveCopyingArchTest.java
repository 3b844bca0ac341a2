package org.mamba4j.samples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.mamba4j.Mamba1Config;
import org.mamba4j.Mamba3Config;
import org.mamba4j.MambaModel;
import picocli.CommandLine;

/** The selective-copying sample's {@code --arch}: which configuration each choice builds, and bad choices refused. */
class SelectiveCopyingArchTest {
    @TempDir Path dir;

    private static SelectiveCopying parsed(String... args) {
        SelectiveCopying s = new SelectiveCopying();
        new CommandLine(s).parseArgs(args);
        return s;
    }

    @Test
    void archChoosesTheConfiguration() {
        Mamba1Config m1 = assertInstanceOf(Mamba1Config.class, parsed().config());
        assertEquals(64, m1.dModel());
        assertEquals(2, m1.layers());
        assertEquals(16, m1.dState());
        Mamba3Config m3 = assertInstanceOf(Mamba3Config.class, parsed("--arch", "mamba3").config());
        assertEquals(64, m3.dModel());
        assertEquals(2, m3.layers());
        assertEquals(16, m3.dState());
        assertEquals(16, m3.headdim());
        assertEquals(8, m3.nheads());
        assertEquals(4, m3.ropeAngles());
        assertEquals(32, assertInstanceOf(Mamba3Config.class, parsed("--arch", "MAMBA3", "--headdim", "32").config()).headdim());
    }

    @Test
    void badChoicesAreUsageErrors() {
        assertTrue(usageError("--arch", "mamba2").contains("--arch must be mamba1 or mamba3"));
        assertTrue(usageError("--arch", "mamba3", "--headdim", "48").contains("--headdim 48 must divide 2 x --d-model = 128"));
        assertTrue(usageError("--arch", "mamba3", "--d-state", "0").contains("dState"));
    }

    private static String usageError(String... args) {
        StringWriter err = new StringWriter();
        CommandLine cli = new CommandLine(new SelectiveCopying());
        cli.setErr(new PrintWriter(err, true));
        assertEquals(2, cli.execute(args), String.join(" ", args));
        return err.toString();
    }

    /** A short Mamba-3 run trains, saves, reloads and evaluates (needs the Mamba-3 forward and backward kernels). */
    @Test
    void aShortMamba3Run() {
        Path out = dir.resolve("m3.safetensors");
        PrintStream old = System.out;
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        System.setOut(new PrintStream(buf, true, StandardCharsets.UTF_8));
        int code;
        try {
            code = new CommandLine(new SelectiveCopying()).execute("--arch", "mamba3", "--length", "16", "--tokens", "2", "--symbols", "4",
                    "--d-model", "16", "--d-state", "8", "--headdim", "8", "--layers", "1", "--batch", "8", "--steps", "20",
                    "--log-every", "10", "--threads", "1", "--out", out.toString(), "--chart", "none");
        } finally {
            System.setOut(old);
        }
        String text = buf.toString(StandardCharsets.UTF_8);
        assertEquals(0, code, text);
        assertTrue(text.contains("Mamba-3 d_model 16 x 1 layers"), text);
        assertTrue(text.contains("final accuracy: "), text);
        try (MambaModel m = MambaModel.load(out)) {
            assertInstanceOf(Mamba3Config.class, m.config());
        }
    }
}
