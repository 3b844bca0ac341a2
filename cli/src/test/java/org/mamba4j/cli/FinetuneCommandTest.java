package org.mamba4j.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.Mamba1Config;
import org.mamba4j.Mamba3Config;
import org.mamba4j.lm.MambaLM;
import org.mamba4j.lm.Sampling;

/** {@code finetune} end to end on tiny folders (Mamba-1 HuggingFace layout, Mamba-3 official layout) on the CPU. */
class FinetuneCommandTest {
    private static final Pattern LOSS = Pattern.compile("loss:  ([0-9.]+) \\(first step\\) -> ([0-9.]+) \\(last step\\)");
    @TempDir static Path dir;
    static Path mamba1, mamba3, noTokenizer, text, shortText;

    @BeforeAll
    static void folders() throws Exception {
        System.setProperty("ENGINE_CACHE_DIR", Path.of("target", "djl-cache").toAbsolutePath().toString());
        mamba1 = TinyModelFolder.write(dir.resolve("tiny-tok"), true);
        mamba3 = TinyModelFolder.writeMamba3(dir.resolve("tiny-m3"), true);
        noTokenizer = TinyModelFolder.write(dir.resolve("tiny"), false);
        text = Files.writeString(dir.resolve("train.txt"), "hello world mamba snake fast java\n".repeat(40));
        shortText = Files.writeString(dir.resolve("short.txt"), "hello world mamba");
    }

    private static String[] run(int expectedExit, String... args) {
        StringWriter out = new StringWriter(), err = new StringWriter();
        int code = MambaCli.run(args, new PrintWriter(out, true), new PrintWriter(err, true));
        assertEquals(expectedExit, code, "exit code of " + String.join(" ", args) + "; stdout: " + out + "; stderr: " + err);
        return new String[] {out.toString(), err.toString()};
    }

    private static String[] finetune(int expectedExit, Path model, Path data, Path output, String... more) {
        String[] base = {"finetune", "--model", model.toString(), "--data", data.toString(), "--output", output.toString(),
                "--batch", "2", "--seq-len", "8"};
        String[] args = Arrays.copyOf(base, base.length + more.length);
        System.arraycopy(more, 0, args, base.length, more.length);
        return run(expectedExit, args);
    }

    private static double[] losses(String stdout) {
        Matcher m = LOSS.matcher(stdout);
        assertTrue(m.find(), stdout);
        return new double[] {Double.parseDouble(m.group(1)), Double.parseDouble(m.group(2))};
    }

    @Test
    void lossGoesDownAndTheOutputLoadsAndGenerates() throws Exception {
        for (Path model : new Path[] {mamba1, mamba3}) {
            Path out = dir.resolve(model.getFileName() + "-ft");
            String[] r = finetune(0, model, text, out, "--steps", "40", "--lr", "1e-2", "--seed", "7");
            double[] loss = losses(r[0]);
            assertTrue(loss[1] < 0.7 * loss[0], model + ": the loss goes down: " + r[0]);
            assertTrue(r[0].contains("tokens/s") && r[0].contains("wrote " + out), r[0]);
            assertTrue(r[1].contains("step 40/40: loss") && r[1].contains("tokens/s"), "plain progress lines: " + r[1]);
            assertTrue(r[1].indexOf('\r') < 0 && r[1].indexOf('\u001b') < 0, "no \\r or ESC when not a terminal");
            assertTrue(Files.isRegularFile(out.resolve("tokenizer.json")), "tokenizer copied along");
            assertTrue(r[0].contains("training curve " + out.resolve("training-curve.png")), r[0]);
            assertIsAChart(out.resolve("training-curve.png"));
            try (Stream<Path> s = Files.list(dir)) {
                assertTrue(s.noneMatch(p -> p.getFileName().toString().contains(".tmp-")), "no temporary folder left");
            }
            // Mamba-1 comes back as a transformers folder (MambaConfig keys), Mamba-3 as an official one
            String config = Files.readString(out.resolve("config.json"));
            boolean m1 = model == mamba1;
            assertEquals(m1, config.contains("\"model_type\" : \"mamba\"") && config.contains("\"hidden_size\""), config);
            assertEquals(!m1, config.contains("\"d_model\""), config);
            try (MambaLM base = MambaLM.fromPretrained(model, Device.cpu(), DType.F32);
                 MambaLM tuned = MambaLM.fromPretrained(out, Device.cpu(), DType.F32)) {
                assertEquals(base.model().config().getClass(), tuned.model().config().getClass());
                assertTrue(tuned.model().config() instanceof Mamba1Config || tuned.model().config() instanceof Mamba3Config);
                String n = tuned.model().parameterNames().get(0);
                assertFalse(Arrays.equals(base.model().getParameter(n), tuned.model().getParameter(n)), "weights changed: " + n);
                // the text repeats "hello world mamba snake fast java": the tuned model continues it
                String generated = tuned.generate("hello world", Sampling.greedy().maxNewTokens(4), piece -> {});
                assertTrue(generated.contains("mamba"), model + ": " + generated);
            }
            String[] g = run(0, "generate", "--model", out.toString(), "--prompt", "hello", "-n", "3");
            assertTrue(g[0].startsWith("hello"), g[0]);
        }
    }

    /** A real PNG with plotted content: ImageIO reads it, 1000 × 560, lines and text in several colours. */
    private static void assertIsAChart(Path png) throws java.io.IOException {
        java.awt.image.BufferedImage image = javax.imageio.ImageIO.read(png.toFile());
        assertTrue(image != null, "ImageIO reads " + png);
        assertEquals(1000, image.getWidth());
        assertEquals(560, image.getHeight());
        java.util.Set<Integer> colours = new java.util.HashSet<>();
        for (int y = 0; y < image.getHeight(); y += 2)
            for (int x = 0; x < image.getWidth(); x += 2) colours.add(image.getRGB(x, y));
        assertTrue(colours.size() > 16, "not a blank canvas: " + colours.size() + " colours");
    }

    @Test
    void curveNoneWritesNoChartAndABadNameIsAUsageError() {
        Path out = dir.resolve("no-curve");
        String[] r = finetune(0, mamba1, text, out, "--steps", "2", "--lr", "1e-3", "--curve", "none");
        assertFalse(Files.exists(out.resolve("training-curve.png")), r[0]);
        assertFalse(r[0].contains("training curve"), r[0]);
        String[] bad = finetune(2, mamba1, text, dir.resolve("bad-curve"), "--steps", "2", "--curve", "../x.png");
        assertTrue(bad[1].contains("--curve must be a file name ending in .png"), bad[1]);
        assertFalse(Files.exists(dir.resolve("bad-curve")), "nothing written");
    }

    @Test
    void sameSeedSameRun() {
        String a = finetune(0, mamba1, text, dir.resolve("seed-a"), "--steps", "3", "--lr", "1e-3", "--seed", "3")[0];
        String b = finetune(0, mamba1, text, dir.resolve("seed-b"), "--steps", "3", "--lr", "1e-3", "--seed", "3")[0];
        assertEquals(losses(a)[1], losses(b)[1]);
    }

    @Test
    void badArgumentsReadClearly() throws Exception {
        Path out = dir.resolve("never");
        String missing = finetune(1, mamba1, dir.resolve("nope.txt"), out, "--steps", "2")[1];
        assertEquals("mamba4j: data file not found: " + dir.resolve("nope.txt"), missing.strip());
        String tooShort = finetune(1, mamba1, shortText, out, "--steps", "2")[1];
        assertTrue(tooShort.startsWith("mamba4j: the data is too short: ") && tooShort.contains("3 tokens")
                && tooShort.contains("--seq-len + 1 = 9"), tooShort);
        assertEquals(1, tooShort.strip().lines().count(), tooShort);
        for (String steps : new String[] {"0", "-3"}) {
            String usage = finetune(2, mamba1, text, out, "--steps", steps)[1];
            assertTrue(usage.startsWith("--steps must be > 0 (got " + steps + ")"), usage);
            assertTrue(usage.contains("Usage: mamba4j finetune"), usage);
        }
        assertTrue(finetune(2, mamba1, text, out, "--steps", "2", "--lr", "0")[1].contains("--lr must be > 0"));
        assertTrue(run(2, "finetune", "--model", mamba1.toString(), "--data", text.toString(), "--output", out.toString())[1]
                .contains("Missing required option: '--steps=N'"));
        String noTok = finetune(1, noTokenizer, text, out, "--steps", "2")[1];
        assertTrue(noTok.startsWith("mamba4j: no tokenizer.json in "), noTok);
        String taken = finetune(1, mamba1, text, mamba3, "--steps", "2")[1];
        assertTrue(taken.startsWith("mamba4j: the output exists and is not an empty folder: "), taken);
        String noModel = finetune(1, dir.resolve("nope"), text, out, "--steps", "2")[1];
        assertEquals(run(1, "info", "--model", dir.resolve("nope").toString())[1], noModel, "the one wording for a missing folder");
        assertFalse(Files.exists(out), "nothing written");
    }

    @Test
    void windowsCoverTheTextAndWrapAround() {
        int[] tokens = new int[23];
        for (int i = 0; i < tokens.length; i++) tokens[i] = i;
        FinetuneCommand.Windows w = new FinetuneCommand.Windows(tokens, 5, 1);
        assertEquals(5, w.count(), "4 full windows + one ending at the last token");
        Set<Integer> starts = new HashSet<>();
        for (int i = 0; i < 5; i++) starts.add(w.nextStart());
        assertEquals(Set.of(0, 5, 10, 15, 17), starts, "one pass visits every window once");
        int[] ids = new int[3 * 5], targets = new int[3 * 5];
        w.fill(ids, targets, 3);  // wraps into a second pass
        for (int i = 0; i < ids.length; i++) assertEquals(ids[i] + 1, targets[i], "targets are the ids shifted by one");
        FinetuneCommand.Windows again = new FinetuneCommand.Windows(tokens, 5, 1);
        int[] ids2 = new int[3 * 5], targets2 = new int[3 * 5];
        for (int i = 0; i < 5; i++) again.nextStart();
        again.fill(ids2, targets2, 3);
        assertTrue(Arrays.equals(ids, ids2), "same seed, same order");
    }

    @Test
    void progressRedrawsOneLineOnATerminal() {
        StringWriter w = new StringWriter();
        TrainingProgress p = new TrainingProgress(new PrintWriter(w, true), 2, true);
        p.update(1, 2.5, 16);
        p.update(2, 1.25, 32);
        p.finish();
        String s = w.toString();
        assertTrue(s.startsWith("\rstep 1/2 [") && s.contains("\rstep 2/2 [####################] loss 1.2500, "), s);
        assertTrue(s.endsWith(System.lineSeparator()) && s.indexOf('\n') == s.length() - 1 - (System.lineSeparator().length() - 1), "one line, redrawn: " + s);
    }

    @Test
    void helpSaysWhatItWrites() {
        String help = run(0, "finetune", "--help")[0];
        assertTrue(help.contains("--seq-len") && help.contains("--lr") && help.contains("--weight-decay") && help.contains("--clip"), help);
        String flat = help.replaceAll("\\s+", " ");
        assertTrue(flat.contains("HuggingFace transformers folder for a Mamba-1 model") && flat.contains("official state-spaces/mamba"
                + " folder for a Mamba-3 model"), help);
        assertTrue(run(0, "--help")[0].contains("finetune"));
    }
}
