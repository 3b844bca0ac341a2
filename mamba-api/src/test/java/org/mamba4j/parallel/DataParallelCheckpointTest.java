package org.mamba4j.parallel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.mamba4j.AdamW;
import org.mamba4j.CheckpointException;
import org.mamba4j.GemmMode;
import org.mamba4j.LossScaler;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.OptimizerState;
import org.mamba4j.Trainer;

/**
 * Hostile and broken data-parallel checkpoints: a bad {@code LATEST} (missing, huge, binary, a path, no such folder),
 * a bad loss-scaler file, missing, corrupt or mismatched pieces. Each must throw {@link CheckpointException} and leave
 * both replicas exactly as they were (their state differs from the checkpoint's, so a half-applied load shows); the
 * intact checkpoint still loads afterwards.
 */
class DataParallelCheckpointTest {
    private static final Mamba1Config CONFIG = Mamba1Config.builder().dModel(16).dState(4).layers(2).build();
    private static final int B = 2, T = 8, IN = 3, HEAD = 3;
    private final List<AutoCloseable> open = new ArrayList<>();
    private List<Trainer> replicas;
    private DataParallelTrainer dp;
    @TempDir
    Path dir;
    private Path step;
    private List<float[]> before;

    private Trainer trainer(Mamba1Config config, int head, long seed) {
        MambaModel m = MambaModel.builder(config).inputDim(IN).seed(seed).build();
        Trainer t = Trainer.builder(m).batch(B).seqLen(T).gemmMode(GemmMode.DETERMINISTIC).adamW(AdamW.ofLearningRate(3e-3))
                .outputHead(head).headSeed(seed + 1).lossScaler(LossScaler.dynamic().withInitScale(64).withGrowth(2, 1)).build();
        open.add(t);
        open.add(m);
        return t;
    }

    private static float[] random(long seed, int n) {
        Random rng = new Random(seed);
        float[] a = new float[n];
        for (int i = 0; i < n; i++) a[i] = (float) rng.nextGaussian();
        return a;
    }

    @BeforeEach
    void saveThenMovePast() {
        replicas = List.of(trainer(CONFIG, HEAD, 3), trainer(CONFIG, HEAD, 4));
        dp = DataParallelTrainer.inProcess(replicas);
        dp.stepMse(random(1, 2 * B * T * IN), random(2, 2 * B * T * HEAD));
        step = dp.saveCheckpoint(dir);
        dp.stepMse(random(3, 2 * B * T * IN), random(4, 2 * B * T * HEAD));
        before = fingerprints();
    }

    @AfterEach
    void close() throws Exception {
        dp.close();
        for (AutoCloseable c : open) c.close();
    }

    /** Everything a load changes, per replica (see {@link #fingerprint(Trainer)}). */
    private List<float[]> fingerprints() {
        List<float[]> out = new ArrayList<>();
        for (Trainer t : replicas) out.add(fingerprint(t));
        return out;
    }

    /** Everything a checkpoint load changes in one trainer: weights, moments, head, step count, loss scale, clean steps. */
    static float[] fingerprint(Trainer t) {
        List<float[]> parts = new ArrayList<>();
        for (String n : t.model().parameterNames()) parts.add(t.model().getParameter(n));
        OptimizerState s = t.exportOptimizerState();
        for (String n : s.names()) {
            parts.add(s.firstMoment(n));
            parts.add(s.secondMoment(n));
        }
        parts.add(t.head().weight());
        parts.add(t.head().bias());
        parts.add(new float[] {t.stepCount(), (float) t.lossScale(), t.lossScalerCleanSteps()});
        return org.mamba4j.TestUtil.concat(parts);
    }

    /** The load must fail with a CheckpointException whose message contains {@code why}, changing no replica. */
    private void rejected(String why) {
        CheckpointException e = assertThrows(CheckpointException.class, () -> dp.loadCheckpoint(dir));
        assertTrue(e.getMessage().contains(why), e.getMessage());
        List<float[]> now = fingerprints();
        for (int i = 0; i < now.size(); i++) assertArrayEquals(before.get(i), now.get(i), "replica " + i + " changed: " + why);
    }

    private void latest(String text) throws IOException {
        Files.writeString(dir.resolve("LATEST"), text, StandardCharsets.ISO_8859_1);
    }

    private void scaler(String text) throws IOException {
        Files.writeString(step.resolve("loss-scaler.txt"), text, StandardCharsets.ISO_8859_1);
    }

    private void loadsAgain() throws IOException {
        latest("step-1\n");
        assertEquals(1, dp.loadCheckpoint(dir));
        for (Trainer t : replicas) {
            assertEquals(1, t.stepCount());
            assertEquals(128, t.lossScale(), 0.0);
        }
    }

    @Test
    void aBadPointerIsRefused() throws IOException {
        Files.delete(dir.resolve("LATEST"));
        rejected("is missing or not a regular file");
        for (String name : new String[] {"../step-1", "step-1/../step-1", "/tmp", "STEP-1", "step-", "step-1 step-1", "step-+1",
                "step-99999999999999999999", "step-1\u0000", "LATEST"})
            {
            latest(name);
            rejected(name.contains("\u0000") ? "not ASCII text" : "does not name a step folder");
        }
        latest("step-42");
        rejected("names step-42, which is not a folder");
        latest(new String(new char[] {0xff, 0xfe, 's', 't', 0x80}));
        rejected("not ASCII text");
        Files.delete(dir.resolve("LATEST"));
        Files.createDirectory(dir.resolve("LATEST"));
        rejected("is missing or not a regular file");
        Files.delete(dir.resolve("LATEST"));
        loadsAgain();
    }

    /** An 8 GiB LATEST (sparse) is refused after reading 65 bytes of it: no allocation for its size. */
    @Test
    void aHugePointerIsRefusedWithoutReadingIt() throws IOException {
        try (RandomAccessFile f = new RandomAccessFile(dir.resolve("LATEST").toFile(), "rw")) {
            f.setLength(8L << 30);
            f.seek(0);
            f.write("step-1\n".getBytes(StandardCharsets.US_ASCII));
        }
        com.sun.management.ThreadMXBean threads = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        assertThrows(CheckpointException.class, () -> DataParallelTrainer.latestCheckpoint(dir));  // classes loaded
        long a0 = threads.getCurrentThreadAllocatedBytes();
        CheckpointException e = assertThrows(CheckpointException.class, () -> DataParallelTrainer.latestCheckpoint(dir));
        long allocated = threads.getCurrentThreadAllocatedBytes() - a0;
        assertTrue(e.getMessage().contains("larger than 64 bytes"), e.getMessage());
        assertTrue(allocated < 256 * 1024, allocated + " bytes allocated");
        rejected("larger than 64 bytes");
        Files.delete(dir.resolve("LATEST"));
        loadsAgain();
    }

    @Test
    void aBadLossScalerFileIsRefusedBeforeAnyReplicaChanges() throws IOException {
        assertEquals("128.0 0", Files.readString(step.resolve("loss-scaler.txt")).trim(), "as saved (the scale grew once)");
        String[][] cases = {{"NaN 0", "is not '<scale> <clean steps>'"}, {"Infinity 0", "is not '<scale>"},
                {"1.0E39 0", "not finite and positive in f32"}, {"1e-60 0", "not finite and positive in f32"},
                {"0 0", "not finite and positive in f32"}, {"-1 0", "is not '<scale>"}, {"128.0", "is not '<scale>"},
                {"128.0 0 0", "is not '<scale>"}, {"128.0 -1", "is not '<scale>"}, {"128.0  0", "is not '<scale>"},
                {"0x1p7 0", "is not '<scale>"}, {"128.0 99999999999999999999", "is not '<scale>"},
                {"128.0\u00000", "not ASCII text"}, {"1".repeat(200) + " 0", "larger than 128 bytes"}, {"", "is not '<scale>"}};
        for (String[] c : cases) {
            scaler(c[0]);
            rejected(c[1]);
        }
        Files.delete(step.resolve("loss-scaler.txt"));
        rejected("loss-scaler state");
        scaler("128.0 0\n");
        loadsAgain();
    }

    @Test
    void missingOrCorruptPiecesAreRefused() throws IOException {
        for (String piece : new String[] {"model.safetensors", "optimizer.safetensors", "head.safetensors"}) {
            Path p = step.resolve(piece), saved = dir.resolve(piece + ".saved");
            Files.move(p, saved);
            rejected(piece);
            byte[] whole = Files.readAllBytes(saved);
            Files.write(p, java.util.Arrays.copyOf(whole, whole.length / 2));  // truncated
            rejected(piece);
            byte[] flipped = whole.clone();
            flipped[flipped.length - 3] ^= 0x10;  // one bit of the data: the checksum catches it
            Files.write(p, flipped);
            rejected(piece);
            Files.move(saved, p, StandardCopyOption.REPLACE_EXISTING);
        }
        loadsAgain();
    }

    /** Pieces of another model's checkpoint (another shape, another head width) in the step folder. */
    @Test
    void mismatchedPiecesAreRefused(@TempDir Path other) throws IOException {
        Mamba1Config wider = Mamba1Config.builder().dModel(16).dState(8).layers(2).build();
        List<Trainer> others = List.of(trainer(wider, HEAD, 9), trainer(CONFIG, 5, 11));
        for (int i = 0; i < 2; i++)
            try (DataParallelTrainer o = DataParallelTrainer.inProcess(List.of(others.get(i)))) {
                o.stepMse(random(5, B * T * IN), random(6, B * T * others.get(i).outputWidth()));
                o.saveCheckpoint(other.resolve("o" + i));
            }
        for (String[] c : new String[][] {{"o0", "model.safetensors", "another shape"}, {"o0", "optimizer.safetensors", "moments of"},
                {"o1", "head.safetensors", "is a head of [5, 16]"}, {"o1", "optimizer.safetensors", "moments of"}}) {
            Path p = step.resolve(c[1]), saved = dir.resolve(c[1] + ".saved");
            Files.move(p, saved);
            Files.copy(other.resolve(c[0]).resolve("step-1").resolve(c[1]), p);
            rejected(c[2]);
            Files.move(saved, p, StandardCopyOption.REPLACE_EXISTING);
        }
        loadsAgain();
    }
}
