package org.mamba4j.fuzz;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.function.Executable;
import org.mamba4j.CheckpointException;

/**
 * What every fuzz target checks for each input, on top of "no crash":
 * <ul>
 *   <li>the only exception a bad file may cause is {@link CheckpointException} (any other one, an
 *       {@link Error} included, is a finding);
 *   <li>no input takes longer than {@value #MAX_MILLIS} ms (a slow input is a finding; a real hang is
 *       also stopped by the fuzzer's own timeout);
 *   <li>the heap allocated while parsing stays within {@code 2 × input size + }{@value #SLACK_BYTES} bytes,
 *       so no size claimed inside a file makes a reader allocate for it (the slack covers fixed costs: JSON
 *       parser buffers, exception stack traces, conversion chunks).
 * </ul>
 * Readers of files get their inputs written to files in a private scratch folder ({@link #file}, {@link #folder});
 * decoders of in-memory input ({@link #bytes}: the TCP communicator's frames) catch their own documented exception
 * and say whether they rejected the input.
 * Per-target figures (executions, slowest input, largest allocation) are printed by {@link #report}.
 */
public final class FuzzChecks {
    public static final long MAX_MILLIS = 2_000;
    public static final long SLACK_BYTES = 1L << 20;
    /** Inputs run twice (see {@link #check}): enough for every class and native library to be loaded. */
    private static final int WARM_UP = 50;

    private static final com.sun.management.ThreadMXBean THREADS =
            (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
    private static final Path SCRATCH = scratch();

    private static long executions, rejected, slowestNanos, largestAllocation, largestAllocationInput;

    private FuzzChecks() {}

    /** A parser run on a file or folder. */
    public interface Parse {
        void run(Path path) throws Exception;
    }

    /**
     * A reader of input that is not a file (a socket's frames, decoded from bytes): it catches the exception its
     * reader documents for bad input and returns false for a rejected input, true for an accepted one. Any other
     * exception is a finding.
     */
    public interface Decode {
        boolean accepted() throws Exception;
    }

    /** The private scratch folder (deleted when the JVM exits), for targets that set up fixed files. */
    public static Path scratch(String name) {
        Path p = SCRATCH.resolve(name);
        try {
            Files.createDirectories(p);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return p;
    }

    /** Writes {@code data} to a file named {@code name} and parses it. */
    public static void file(String name, byte[] data, Parse parse) {
        Path f = SCRATCH.resolve(name);
        write(f, data);
        check(data.length, () -> {
            parse.run(f);
            return true;
        });
    }

    /** Decodes {@code data} held in memory, under the same three rules (the allowed exception is the decoder's). */
    public static void bytes(byte[] data, Decode decode) {
        check(data.length, decode);
    }

    /**
     * Writes files into {@code folder} (an empty byte array still writes an empty file; a null leaves the file
     * out) and parses the folder; files of earlier inputs not named here are removed first.
     */
    public static void folder(Path folder, Map<String, byte[]> files, List<String> keep, Parse parse) {
        try (Stream<Path> old = Files.list(folder)) {
            for (Path p : (Iterable<Path>) old::iterator)
                if (!keep.contains(p.getFileName().toString())) Files.delete(p);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        long total = 0;
        for (Map.Entry<String, byte[]> e : files.entrySet()) {
            if (e.getValue() == null) continue;
            write(folder.resolve(e.getKey()), e.getValue());
            total += e.getValue().length;
        }
        check(total, () -> {
            parse.run(folder);
            return true;
        });
    }

    /**
     * Splits an input into the files of a folder at each line {@code =====}: part i becomes {@code names[i]}; a
     * file with no part is left out.
     */
    public static Map<String, byte[]> split(byte[] data, String... names) {
        String text = new String(data, StandardCharsets.ISO_8859_1);  // byte-preserving
        String[] parts = text.split("\n=====\n", names.length);
        Map<String, byte[]> files = new LinkedHashMap<>();
        for (int i = 0; i < names.length; i++)
            files.put(names[i], i < parts.length ? parts[i].getBytes(StandardCharsets.ISO_8859_1) : null);
        return files;
    }

    private static void check(long inputBytes, Decode parse) {
        // The first inputs of a JVM load classes and natives, on this thread's allocation count and clock: run
        // them once unmeasured, then measure the second run, so every input (the seeds too) is checked.
        if (executions < WARM_UP) run(parse);
        long[] m = measure(parse);
        executions++;
        if (m[2] == 0) rejected++;
        // An input that takes a new path may load classes or wait for the JIT once: a violation counts only if
        // it happens again (a size claim that drives an allocation does it every time).
        if (m[0] > MAX_MILLIS * 1_000_000 || m[1] > 2 * inputBytes + SLACK_BYTES) m = measure(parse);
        slowestNanos = Math.max(slowestNanos, m[0]);
        if (m[1] > largestAllocation) {
            largestAllocation = m[1];
            largestAllocationInput = inputBytes;
        }
        if (m[0] > MAX_MILLIS * 1_000_000)
            throw new AssertionError("an input of " + inputBytes + " bytes took " + m[0] / 1_000_000 + " ms (limit " + MAX_MILLIS + ")");
        if (m[1] > 2 * inputBytes + SLACK_BYTES)
            throw new AssertionError("an input of " + inputBytes + " bytes made the parser allocate " + m[1]
                    + " bytes (limit 2 × size + " + SLACK_BYTES + ")");
    }

    /** One run: {nanoseconds, heap bytes allocated by this thread, 1 if accepted else 0}. */
    private static long[] measure(Decode parse) {
        long allocated0 = THREADS.getCurrentThreadAllocatedBytes();
        long t0 = System.nanoTime();
        boolean accepted = run(parse);
        long nanos = System.nanoTime() - t0;
        return new long[] {nanos, THREADS.getCurrentThreadAllocatedBytes() - allocated0, accepted ? 1 : 0};
    }

    /** Runs the parser; false when it rejected the input (the one allowed exception). */
    private static boolean run(Decode parse) {
        try {
            return parse.accepted();
        } catch (CheckpointException expected) {
            return false;
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Exception e) {
            throw new AssertionError("a checked exception escaped the parser", e);
        }
    }

    /**
     * For hand-made hostile files (HostileSizeClaimsTest, mamba-lm's tests): {@code load} must reject {@code
     * fileOrFolder} with a {@link CheckpointException}, and its second run (the first loads classes) must stay
     * within the bounds every fuzz input is held to: {@code 2 × size + }{@value #SLACK_BYTES} bytes of heap
     * allocated by this thread and under {@value #MAX_MILLIS} ms.
     */
    public static void assertRejectedCheaply(Path fileOrFolder, Executable load) throws IOException {
        assertThrows(CheckpointException.class, load);
        long a0 = THREADS.getCurrentThreadAllocatedBytes(), t0 = System.nanoTime();
        CheckpointException e = assertThrows(CheckpointException.class, load);
        long allocated = THREADS.getCurrentThreadAllocatedBytes() - a0, millis = (System.nanoTime() - t0) / 1_000_000;
        long size = Files.isDirectory(fileOrFolder) ? folderSize(fileOrFolder) : Files.size(fileOrFolder);
        assertTrue(allocated <= 2 * size + SLACK_BYTES, fileOrFolder.getFileName() + ": " + allocated
                + " bytes allocated for a " + size + "-byte file (" + e.getMessage() + ")");
        assertTrue(millis < MAX_MILLIS, fileOrFolder.getFileName() + " took " + millis + " ms");
    }

    private static long folderSize(Path folder) throws IOException {
        long n = 0;
        try (Stream<Path> files = Files.list(folder)) {
            for (Path p : (Iterable<Path>) files::iterator) n += Files.size(p);
        }
        return n;
    }

    /** Prints this JVM's figures for a target (the fuzzer prints its own executions and coverage too). */
    public static void report(String target) {
        System.out.printf("fuzz %s: %d inputs (%d rejected as bad files), slowest %.1f ms,"
                        + " largest heap allocation %d bytes (for a %d-byte input)%n", target, executions, rejected,
                slowestNanos / 1e6, largestAllocation, largestAllocationInput);
        executions = rejected = slowestNanos = largestAllocation = largestAllocationInput = 0;  // the next target's figures
    }

    private static void write(Path f, byte[] data) {
        try {
            Files.write(f, data);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static Path scratch() {
        try {
            // in memory where possible: rewriting a file on ext4 flushes it to disk (~2 ms), far more than a parse
            Path shm = Path.of("/dev/shm");
            Path dir = Files.isDirectory(shm) && Files.isWritable(shm) ? Files.createTempDirectory(shm, "mamba4j-fuzz")
                    : Files.createTempDirectory("mamba4j-fuzz");
            Runtime.getRuntime().addShutdownHook(new Thread(() -> delete(dir)));
            return dir;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static void delete(Path dir) {
        try (Stream<Path> all = Files.walk(dir)) {
            List<Path> paths = new ArrayList<>(all.toList());
            java.util.Collections.reverse(paths);
            for (Path p : paths) Files.deleteIfExists(p);
        } catch (IOException ignored) {
            // a temp folder: the OS cleans it eventually
        }
    }
}
