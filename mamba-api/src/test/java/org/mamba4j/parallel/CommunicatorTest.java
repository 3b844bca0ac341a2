package org.mamba4j.parallel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.ServerSocket;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.IntFunction;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The communicators' collectives and fault paths on the CPU: in-process ranks on threads, TCP ranks on threads over
 * loopback (the rendezvous, a peer that never connects, a peer that hangs, a peer that dies, an unreachable rank 0,
 * a duplicate rank), and the torchrun environment. Every fault must end in a {@link CommunicatorException} well
 * within a bound — never a hang (each test also has a hard time limit through its futures).
 */
class CommunicatorTest {
    private final ExecutorService pool = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "communicator-test");
        t.setDaemon(true);
        return t;
    });

    @AfterEach
    void stop() {
        pool.shutdownNow();
    }

    /** Runs one task per rank on its own thread; returns the futures. */
    private <T> List<Future<T>> ranks(int n, IntFunction<T> task) {
        List<Future<T>> fs = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            int rank = r;
            fs.add(pool.submit(() -> task.apply(rank)));
        }
        return fs;
    }

    private static <T> T get(Future<T> f) throws Exception {
        return f.get(30, TimeUnit.SECONDS);  // a hang fails the test here rather than blocking the build
    }

    /** The exception a rank's task ended with (it must have failed). */
    private static Throwable failure(Future<?> f) throws Exception {
        ExecutionException e = assertThrows(ExecutionException.class, () -> f.get(30, TimeUnit.SECONDS));
        return e.getCause();
    }

    private static float[] values(int rank, int n) {
        float[] v = new float[n];
        for (int i = 0; i < n; i++) v[i] = (float) Math.sin(1 + rank * 31 + i * 0.7) * (rank + 1);
        return v;
    }

    private void checkCollectives(List<? extends Communicator> comms) throws Exception {
        int n = comms.size();
        List<Future<Void>> fs = ranks(n, r -> {
            Communicator c = comms.get(r);
            assertEquals(r, c.rank());
            assertEquals(n, c.worldSize());
            float[] all = c.allGather(values(r, 5));
            for (int q = 0; q < n; q++)
                for (int i = 0; i < 5; i++) assertEquals(values(q, 5)[i], all[q * 5 + i], "rank " + r + " sees rank " + q);
            double[] d = c.allGather(new double[] {r + 0.25, -r});
            for (int q = 0; q < n; q++) {
                assertEquals(q + 0.25, d[2 * q]);
                assertEquals(-q, d[2 * q + 1]);
            }
            float[] b = values(r, 7);
            c.broadcast(b, n - 1);
            assertArrayEquals(values(n - 1, 7), b, "broadcast from the last rank");
            return null;
        });
        for (Future<Void> f : fs) get(f);
    }

    // ---- in-process ----

    @Test
    void inProcessCollectives() throws Exception {
        List<InProcessCommunicator> g = InProcessCommunicator.group(3);
        checkCollectives(g);
        g.forEach(InProcessCommunicator::close);
    }

    @Test
    void inProcessRankThatNeverComesTimesOutTheOthers() throws Exception {
        List<InProcessCommunicator> g = InProcessCommunicator.group(3, Duration.ofMillis(300));
        long t0 = System.nanoTime();
        List<Future<float[]>> fs = ranks(2, r -> g.get(r).allGather(values(r, 3)));  // rank 2 never calls
        for (Future<float[]> f : fs) {
            Throwable e = failure(f);
            assertInstanceOf(CommunicatorException.class, e);
            assertTrue(e.getMessage().contains("in-process group"), e.getMessage());
        }
        assertTrue(elapsedMs(t0) < 10_000, "failed after " + elapsedMs(t0) + " ms");
        // the group stays broken: the late rank fails at once instead of waiting
        long t1 = System.nanoTime();
        CommunicatorException late = assertThrows(CommunicatorException.class, () -> g.get(2).allGather(values(2, 3)));
        assertTrue(late.getMessage().contains("broken"), late.getMessage());
        assertTrue(elapsedMs(t1) < 250, "the late rank waited " + elapsedMs(t1) + " ms");
    }

    @Test
    void inProcessAbortFailsAWaitingRankAtOnce() throws Exception {
        List<InProcessCommunicator> g = InProcessCommunicator.group(2, Duration.ofMinutes(5));
        long t0 = System.nanoTime();
        Future<float[]> waiting = pool.submit(() -> g.get(0).allGather(values(0, 3)));
        Thread.sleep(200);
        g.get(1).abort("replica 1 failed its backward");
        Throwable e = failure(waiting);
        assertInstanceOf(CommunicatorException.class, e);
        assertTrue(e.getMessage().contains("replica 1 failed its backward"), e.getMessage());
        assertTrue(elapsedMs(t0) < 10_000);
    }

    /**
     * An abort racing with a rank on its way into a collective: the rank fails at once whichever comes first (with a
     * CyclicBarrier, an abort between the rank's broken check and its wait left it waiting out the whole timeout — a
     * data-parallel test's 5 minutes). Many rounds, the abort released at the same moment as the collective.
     */
    @Test
    void inProcessAbortRacingAnArrivalFailsItAtOnce() throws Exception {
        for (int round = 0; round < 300; round++) {
            List<InProcessCommunicator> g = InProcessCommunicator.group(2, Duration.ofSeconds(60));
            CountDownLatch go = new CountDownLatch(1);
            String why = "round " + round;
            Future<float[]> arriving = pool.submit(() -> {
                go.await();
                return g.get(0).allGather(values(0, 3));
            });
            Future<Void> aborting = pool.submit(() -> {
                go.await();
                g.get(1).abort(why);
                return null;
            });
            long t0 = System.nanoTime();
            go.countDown();
            aborting.get(10, TimeUnit.SECONDS);
            assertInstanceOf(CommunicatorException.class, failure(arriving));
            assertTrue(elapsedMs(t0) < 10_000, "round " + round + ": the arriving rank waited " + elapsedMs(t0) + " ms");
        }
    }

    @Test
    void inProcessMismatchedCollectivesFail() throws Exception {
        List<InProcessCommunicator> g = InProcessCommunicator.group(2, Duration.ofSeconds(20));
        Future<float[]> a = pool.submit(() -> g.get(0).allGather(values(0, 3)));
        Future<Void> b = pool.submit(() -> {
            g.get(1).broadcast(values(1, 3), 0);
            return null;
        });
        for (Future<?> f : List.of(a, b)) {
            Throwable e = failure(f);
            assertInstanceOf(CommunicatorException.class, e);
            assertTrue(e.getMessage().contains("mismatch") || e.getMessage().contains("broken"), e.getMessage());
        }
    }

    // ---- TCP ----

    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    static LaunchConfig launch(int rank, int world, int port, Duration timeout) {
        return new LaunchConfig(rank, world, rank, "127.0.0.1", port, timeout);
    }

    private List<TcpCommunicator> tcpGroup(int n, Duration timeout) throws Exception {
        int port = freePort();
        List<Future<TcpCommunicator>> fs = ranks(n, r -> TcpCommunicator.connect(launch(r, n, port, timeout)));
        List<TcpCommunicator> out = new ArrayList<>();
        for (Future<TcpCommunicator> f : fs) out.add(get(f));
        return out;
    }

    @Test
    void tcpRendezvousAndCollectives() throws Exception {
        List<TcpCommunicator> g = tcpGroup(3, Duration.ofSeconds(20));
        checkCollectives(g);
        checkCollectives(g);  // twice: the sequence numbers advance together
        List<Future<byte[]>> ids = ranks(3, r -> g.get(r).broadcastBytes(r == 0 ? new byte[] {1, 2, 3} : new byte[0], 0, 16));
        for (Future<byte[]> f : ids) assertArrayEquals(new byte[] {1, 2, 3}, get(f));
        g.forEach(TcpCommunicator::close);
    }

    @Test
    void tcpWorldOfOneNeedsNoPeers() throws Exception {
        try (TcpCommunicator c = TcpCommunicator.connect(launch(0, 1, freePort(), Duration.ofSeconds(5)))) {
            assertArrayEquals(new float[] {1, 2}, c.allGather(new float[] {1, 2}));
        }
    }

    @Test
    void tcpPeerThatNeverConnectsFailsTheRendezvous() throws Exception {
        int port = freePort();
        Duration timeout = Duration.ofMillis(1500);
        long t0 = System.nanoTime();
        List<Future<TcpCommunicator>> fs = ranks(2, r -> TcpCommunicator.connect(launch(r, 3, port, timeout)));  // no rank 2
        Throwable root = failure(fs.get(0));
        assertInstanceOf(CommunicatorException.class, root);
        assertTrue(root.getMessage().contains("ranks [2] did not join"), root.getMessage());
        Throwable one = failure(fs.get(1));
        assertInstanceOf(CommunicatorException.class, one);
        assertTrue(one.getMessage().contains("ranks [2] did not join") || one.getMessage().contains("rendezvous"), one.getMessage());
        assertTrue(elapsedMs(t0) < 10_000, "failed after " + elapsedMs(t0) + " ms");
    }

    @Test
    void tcpUnreachableRankZeroFailsNamingTheAddress() throws Exception {
        int port = freePort();
        long t0 = System.nanoTime();
        CommunicatorException e = assertThrows(CommunicatorException.class,
                () -> TcpCommunicator.connect(launch(1, 2, port, Duration.ofMillis(700))));
        assertTrue(e.getMessage().contains("could not reach rank 0 at 127.0.0.1:" + port), e.getMessage());
        assertTrue(elapsedMs(t0) < 10_000);
    }

    @Test
    void tcpDuplicateRankIsRefused() throws Exception {
        int port = freePort();
        Duration timeout = Duration.ofSeconds(10);
        Future<TcpCommunicator> root = pool.submit(() -> TcpCommunicator.connect(launch(0, 3, port, timeout)));
        List<Future<TcpCommunicator>> ones = new ArrayList<>();
        for (int i = 0; i < 2; i++) ones.add(pool.submit(() -> TcpCommunicator.connect(launch(1, 3, port, timeout))));
        Throwable e = failure(root);
        assertTrue(e.getMessage().contains("two processes claim rank 1"), e.getMessage());
        for (Future<TcpCommunicator> f : ones) assertInstanceOf(CommunicatorException.class, failure(f));
    }

    @Test
    void tcpWrongWorldSizeIsRefused() throws Exception {
        int port = freePort();
        Duration timeout = Duration.ofSeconds(10);
        Future<TcpCommunicator> root = pool.submit(() -> TcpCommunicator.connect(launch(0, 2, port, timeout)));
        Future<TcpCommunicator> other = pool.submit(() -> TcpCommunicator.connect(launch(1, 3, port, timeout)));
        assertTrue(failure(root).getMessage().contains("WORLD_SIZE 3, rank 0 with 2"));
        assertTrue(failure(other).getMessage().contains("rank 0 ended the rendezvous"), failure(other).getMessage());
    }

    @Test
    void tcpPeerThatHangsTimesOutTheOthers() throws Exception {
        List<TcpCommunicator> g = tcpGroup(3, Duration.ofMillis(1200));
        long t0 = System.nanoTime();
        List<Future<float[]>> fs = ranks(2, r -> g.get(r).allGather(values(r, 4)));  // rank 2 is connected but never calls
        Throwable root = failure(fs.get(0));
        assertInstanceOf(CommunicatorException.class, root);
        assertTrue(root.getMessage().contains("rank 2 did not reach allGather"), root.getMessage());
        Throwable one = failure(fs.get(1));
        assertTrue(one.getMessage().contains("rank 2 did not reach") || one.getMessage().contains("rank 0 did not answer"),
                one.getMessage());
        assertTrue(elapsedMs(t0) < 10_000, "failed after " + elapsedMs(t0) + " ms");
        // the hung rank, when it wakes up, finds the group gone
        assertInstanceOf(CommunicatorException.class, assertThrows(RuntimeException.class, () -> g.get(2).allGather(values(2, 4))));
        g.forEach(TcpCommunicator::close);
    }

    @Test
    void tcpPeerThatDiesFailsTheOthersAtOnce() throws Exception {
        List<TcpCommunicator> g = tcpGroup(3, Duration.ofMinutes(2));  // long timeout: the failure must not wait for it
        long t0 = System.nanoTime();
        List<Future<float[]>> fs = ranks(2, r -> g.get(r).allGather(values(r, 4)));
        Thread.sleep(200);
        g.get(2).close();  // its sockets close, as when the process is killed
        Throwable root = failure(fs.get(0));
        assertTrue(root.getMessage().contains("rank 2 closed its connection"), root.getMessage());
        Throwable one = failure(fs.get(1));
        assertTrue(one.getMessage().contains("rank 0 aborted the group: rank 2 closed its connection")
                || one.getMessage().contains("rank 0 closed the connection"), one.getMessage());
        assertTrue(elapsedMs(t0) < 10_000, "failed after " + elapsedMs(t0) + " ms");
        g.forEach(TcpCommunicator::close);
    }

    @Test
    void tcpMismatchedCollectivesFail() throws Exception {
        List<TcpCommunicator> g = tcpGroup(2, Duration.ofSeconds(20));
        Future<float[]> a = pool.submit(() -> g.get(0).allGather(values(0, 3)));
        Future<double[]> b = pool.submit(() -> g.get(1).allGather(new double[] {1}));
        assertTrue(failure(a).getMessage().contains("collective mismatch"));
        assertInstanceOf(CommunicatorException.class, failure(b));
        g.forEach(TcpCommunicator::close);
    }

    // ---- torchrun's environment ----

    @Test
    void launchConfigReadsTorchrunVariables() {
        LaunchConfig c = LaunchConfig.fromEnvironment(Map.of("RANK", "3", "WORLD_SIZE", "8", "LOCAL_RANK", "1",
                "MASTER_ADDR", "node0", "MASTER_PORT", "29500", "MAMBA4J_DIST_TIMEOUT_SECONDS", "42"));
        assertEquals(new LaunchConfig(3, 8, 1, "node0", 29500, Duration.ofSeconds(42)), c);
        LaunchConfig d = LaunchConfig.fromEnvironment(Map.of("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "1"));
        assertEquals(0, d.localRank());
        assertEquals(LaunchConfig.DEFAULT_TIMEOUT, d.timeout());
        IllegalArgumentException missing = assertThrows(IllegalArgumentException.class,
                () -> LaunchConfig.fromEnvironment(Map.of("RANK", "0", "WORLD_SIZE", "2", "MASTER_PORT", "1")));
        assertTrue(missing.getMessage().contains("MASTER_ADDR is not set"), missing.getMessage());
        assertTrue(assertThrows(IllegalArgumentException.class, () -> LaunchConfig.fromEnvironment(
                Map.of("RANK", "x", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "1"))).getMessage().contains("RANK = 'x'"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> LaunchConfig.fromEnvironment(
                Map.of("RANK", "2", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "1"))).getMessage().contains("RANK = 2"));
        // a hostile or mistyped WORLD_SIZE is refused before rank 0 sizes anything by it
        assertTrue(assertThrows(IllegalArgumentException.class, () -> LaunchConfig.fromEnvironment(
                Map.of("RANK", "0", "WORLD_SIZE", "2147483647", "MASTER_ADDR", "h", "MASTER_PORT", "1"))).getMessage()
                .contains("WORLD_SIZE = 2147483647 must be in [1, 1048576]"));
    }

    private static long elapsedMs(long t0) {
        return (System.nanoTime() - t0) / 1_000_000;
    }

}
