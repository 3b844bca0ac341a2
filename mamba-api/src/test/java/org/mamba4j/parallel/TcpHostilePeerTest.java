package org.mamba4j.parallel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.mamba4j.parallel.TcpFrames.Size;

/**
 * What the TCP communicator does with bytes that are not a well-behaved rank's: the decoder's worst cases from
 * memory ({@link TcpFrames}), then over loopback a stranger on rank 0's port (silent, garbage, half a hello), a fake
 * rank that claims huge or negative payloads, and a fake rank 0. Each ends in a {@link CommunicatorException} naming
 * the peer, or the stranger being dropped while the real ranks join — within the timeout, never a hang or an
 * allocation of the claimed size.
 */
class TcpHostilePeerTest {
    private static final int M = TcpFrames.MAGIC;
    private final ExecutorService pool = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "hostile-peer-test");
        t.setDaemon(true);
        return t;
    });

    @AfterEach
    void stop() {
        pool.shutdownNow();
    }

    // ---- the decoder, from memory ----

    private static DataInputStream stream(Frame f) {
        return new DataInputStream(new ByteArrayInputStream(f.bytes()));
    }

    /** A hand-made byte stream (any length claims). */
    private static final class Frame {
        final ByteArrayOutputStream b = new ByteArrayOutputStream();
        final DataOutputStream o = new DataOutputStream(b);

        Frame ints(int... v) throws IOException {
            for (int x : v) o.writeInt(x);
            return this;
        }

        Frame head(long seq, String op) throws IOException {
            o.writeLong(seq);
            o.writeUTF(op);
            return this;
        }

        Frame raw(byte[] v) throws IOException {
            o.write(v);
            return this;
        }

        byte[] bytes() {
            return b.toByteArray();
        }
    }

    @Test
    void negativeAndHugePayloadClaimsAreRefusedBeforeAllocating() throws IOException {
        for (int claim : new int[] {-1, Integer.MIN_VALUE, 25, Integer.MAX_VALUE}) {
            Frame f = new Frame().head(4, "allGather(float[3])").ints(claim);
            CommunicatorException e = assertThrows(CommunicatorException.class,
                    () -> TcpFrames.readPart(stream(f), "rank 2 (/10.0.0.3:4000)", 4, "allGather(float[3])", Size.exactly(12)));
            assertEquals("rank 2 (/10.0.0.3:4000) sent a payload of " + claim + " bytes for allGather(float[3]), expected 12 bytes",
                    e.getMessage());
            CommunicatorException r = assertThrows(CommunicatorException.class,
                    () -> TcpFrames.readReply(stream(f), 4, "allGather(float[3])", Size.exactly(24)));
            assertTrue(r.getMessage().startsWith("rank 0 sent a payload of " + claim + " bytes"), r.getMessage());
        }
        // a bounded payload (the NCCL id) takes any length up to its bound, and nothing beyond
        Frame ok = new Frame().head(0, "broadcastBytes(root 0)").ints(3).raw(new byte[] {7, 8, 9});
        assertArrayEquals(new byte[] {7, 8, 9}, TcpFrames.readReply(stream(ok), 0, "broadcastBytes(root 0)", Size.atMost(4096)));
        Frame big = new Frame().head(0, "broadcastBytes(root 0)").ints(4097);
        assertThrows(CommunicatorException.class, () -> TcpFrames.readReply(stream(big), 0, "broadcastBytes(root 0)", Size.atMost(4096)));
    }

    @Test
    void truncatedFramesEndInEofNotAGuess() throws IOException {
        byte[] whole = new Frame().head(1, "sumGradients(float[2])").ints(8).raw(new byte[8]).bytes();
        assertEquals(8, TcpFrames.readPart(new DataInputStream(new ByteArrayInputStream(whole)), "rank 1", 1, "sumGradients(float[2])",
                Size.exactly(8)).length);
        for (int cut = 0; cut < whole.length; cut++) {
            byte[] part = java.util.Arrays.copyOf(whole, cut);
            assertThrows(EOFException.class, () -> TcpFrames.readPart(new DataInputStream(new ByteArrayInputStream(part)), "rank 1", 1,
                    "sumGradients(float[2])", Size.exactly(8)), "cut at " + cut);
        }
    }

    @Test
    void namesAreBoundedAndMustBeModifiedUtf8() throws IOException {
        // a name claiming 65,535 bytes is refused from its 2-byte length, before the bytes are read
        byte[] claim = {0, 0, 0, 0, 0, 0, 0, 0, (byte) 0xff, (byte) 0xff};
        CommunicatorException e = assertThrows(CommunicatorException.class, () -> TcpFrames.readPart(
                new DataInputStream(new ByteArrayInputStream(claim)), "rank 1", 0, "x", Size.exactly(0)));
        assertEquals("rank 1 sent a collective name of 65535 bytes (at most 8192)", e.getMessage());
        byte[] malformed = {0, 0, 0, 0, 0, 0, 0, 0, 0, 2, (byte) 0xc3, 0x28};
        assertTrue(assertThrows(CommunicatorException.class, () -> TcpFrames.readPart(
                new DataInputStream(new ByteArrayInputStream(malformed)), "rank 1", 0, "x", Size.exactly(0))).getMessage()
                .contains("malformed collective name"));
        // a long abort reason is cut to the bound when written, and read back whole
        String reason = "x".repeat(100_000);
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        TcpFrames.writeFrame(new DataOutputStream(b), -1, reason, new byte[0]);
        CommunicatorException abort = assertThrows(CommunicatorException.class, () -> TcpFrames.readReply(
                new DataInputStream(new ByteArrayInputStream(b.toByteArray())), 3, "allGather(float[1])", Size.exactly(8)));
        assertTrue(abort.getMessage().startsWith("rank 0 aborted the group: xxx"), abort.getMessage().substring(0, 40));
        assertTrue(abort.getMessage().length() < TcpFrames.MAX_TEXT_BYTES + 100);
    }

    @Test
    void helloAndWelcomeAreChecked() throws IOException {
        assertEquals("protocol version 2 (rank 0 speaks 1)", TcpFrames.refusal(new TcpFrames.Hello(M, 2, 1, 4), 4, r -> false));
        assertEquals("rank 1 was launched with WORLD_SIZE 5, rank 0 with 4",
                TcpFrames.refusal(new TcpFrames.Hello(M, 1, 1, 5), 4, r -> false));
        for (int r : new int[] {0, -1, 4, Integer.MAX_VALUE, Integer.MIN_VALUE})
            assertEquals("rank " + r + " is outside [1, 4)", TcpFrames.refusal(new TcpFrames.Hello(M, 1, r, 4), 4, q -> false));
        assertEquals("two processes claim rank 2", TcpFrames.refusal(new TcpFrames.Hello(M, 1, 2, 4), 4, q -> q == 2));
        assertEquals(null, TcpFrames.refusal(new TcpFrames.Hello(M, 1, 3, 4), 4, q -> q == 2));
        assertEquals("rank 1: h:1 is not a mamba4j rendezvous", assertThrows(CommunicatorException.class,
                () -> TcpFrames.readWelcome(stream(new Frame().ints(0x48545450, 0)), "rank 1", "h:1")).getMessage());
        assertEquals("rank 1: h:1 answered the rendezvous with status 7 (not 0 or 1)", assertThrows(CommunicatorException.class,
                () -> TcpFrames.readWelcome(stream(new Frame().ints(M, 7)), "rank 1", "h:1")).getMessage());
        assertThrows(EOFException.class, () -> TcpFrames.readWelcome(stream(new Frame().ints(M)), "rank 1", "h:1"));
        TcpFrames.readWelcome(stream(new Frame().ints(M, 0)), "rank 1", "h:1");
    }

    // ---- strangers and fake peers over loopback ----

    private static LaunchConfig launch(int rank, int world, int port, Duration timeout) {
        return CommunicatorTest.launch(rank, world, port, timeout);
    }

    /** A connection to rank 0's port that retries until rank 0 listens. */
    private static Socket connectWhenListening(int port) throws Exception {
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (true) {
            Socket s = new Socket();
            try {
                s.connect(new InetSocketAddress("127.0.0.1", port), 1000);
                return s;
            } catch (IOException e) {
                s.close();
                if (System.nanoTime() > deadline) throw e;
                Thread.sleep(20);
            }
        }
    }

    /** Whether rank 0 closed the stranger's connection (its read ends) within the wait. */
    private static boolean closedByPeer(Socket s, int waitMillis) throws IOException {
        s.setSoTimeout(waitMillis);
        try {
            return s.getInputStream().read() == -1;
        } catch (IOException e) {
            return !(e instanceof java.net.SocketTimeoutException);  // a reset counts as closed
        }
    }

    private void strangerIsDroppedAndTheRanksJoin(byte[] strangerSends) throws Exception {
        int port = CommunicatorTest.freePort();
        Duration timeout = Duration.ofSeconds(25);
        long t0 = System.nanoTime();
        Future<TcpCommunicator> root = pool.submit(() -> TcpCommunicator.connect(launch(0, 2, port, timeout)));
        try (Socket stranger = connectWhenListening(port)) {
            stranger.getOutputStream().write(strangerSends);
            stranger.getOutputStream().flush();
            Thread.sleep(100);  // the stranger is first in line
            Future<TcpCommunicator> one = pool.submit(() -> TcpCommunicator.connect(launch(1, 2, port, timeout)));
            TcpCommunicator r0 = root.get(20, TimeUnit.SECONDS), r1 = one.get(20, TimeUnit.SECONDS);
            long ms = (System.nanoTime() - t0) / 1_000_000;
            assertTrue(ms < TcpCommunicator.HELLO_MILLIS + 5_000, "the rendezvous took " + ms + " ms");
            assertTrue(closedByPeer(stranger, 2_000), "rank 0 dropped the stranger");
            Future<float[]> g1 = pool.submit(() -> r1.allGather(new float[] {2}));
            assertArrayEquals(new float[] {1, 2}, r0.allGather(new float[] {1}));
            assertArrayEquals(new float[] {1, 2}, g1.get(20, TimeUnit.SECONDS));
            r0.close();
            r1.close();
        }
    }

    @Test
    void aSilentStrangerIsDroppedAfterTheHelloTimeAndTheRanksJoin() throws Exception {
        strangerIsDroppedAndTheRanksJoin(new byte[0]);
    }

    @Test
    void aStrangerSendingHalfAHelloIsDropped() throws Exception {
        strangerIsDroppedAndTheRanksJoin(new byte[] {0x6d, 0x34, 0x6a});
    }

    @Test
    void aStrangerSendingGarbageIsDroppedAtOnce() throws Exception {
        strangerIsDroppedAndTheRanksJoin("GET / HTTP/1.1\r\nHost: x\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
    }

    @Test
    void strangersAloneNeverMakeARankAndTheRendezvousEndsInItsTimeout() throws Exception {
        int port = CommunicatorTest.freePort();
        long t0 = System.nanoTime();
        Future<TcpCommunicator> root = pool.submit(() -> TcpCommunicator.connect(launch(0, 2, port, Duration.ofMillis(2500))));
        try (Socket a = connectWhenListening(port); Socket b = connectWhenListening(port)) {
            a.getOutputStream().write(new byte[] {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17});
            ExecutionException e = assertThrows(ExecutionException.class, () -> root.get(20, TimeUnit.SECONDS));
            assertInstanceOf(CommunicatorException.class, e.getCause());
            assertTrue(e.getCause().getMessage().contains("ranks [1] did not join"), e.getCause().getMessage());
        }
        long ms = (System.nanoTime() - t0) / 1_000_000;
        assertTrue(ms < 8_000, "rank 0 gave up after " + ms + " ms");
    }

    /** A fake rank 1: says a correct hello, reads the welcome, then sends {@code frame}; rank 0's allGather must fail. */
    private String rankZeroMeetsFakePeer(byte[] frame) throws Exception {
        int port = CommunicatorTest.freePort();
        Future<TcpCommunicator> root = pool.submit(() -> TcpCommunicator.connect(launch(0, 2, port, Duration.ofSeconds(20))));
        try (Socket fake = connectWhenListening(port)) {
            DataOutputStream o = new DataOutputStream(fake.getOutputStream());
            TcpFrames.writeHello(o, 1, 2);
            o.flush();
            TcpFrames.readWelcome(new DataInputStream(fake.getInputStream()), "fake rank 1", "rank 0");
            TcpCommunicator r0 = root.get(20, TimeUnit.SECONDS);
            o.write(frame);
            o.flush();
            long t0 = System.nanoTime();
            CommunicatorException e = assertThrows(CommunicatorException.class, () -> r0.allGather(new float[] {1, 2, 3}));
            assertTrue((System.nanoTime() - t0) / 1_000_000 < 5_000, "rank 0 noticed the bad frame at once");
            // the group is broken afterwards, and the fake peer was told why
            assertTrue(assertThrows(CommunicatorException.class, () -> r0.allGather(new float[] {1, 2, 3})).getMessage().contains("broken"));
            r0.close();
            return e.getMessage();
        }
    }

    @Test
    void aPeerClaimingAHugePayloadFailsTheGroupNamingIt() throws Exception {
        String why = rankZeroMeetsFakePeer(new Frame().head(0, "allGather(float[3])").ints(Integer.MAX_VALUE).bytes());
        assertTrue(why.matches("rank 1 \\(/127\\.0\\.0\\.1:[0-9]+\\) sent a payload of 2147483647 bytes for allGather\\(float\\[3\\]\\), "
                + "expected 12 bytes"), why);
    }

    @Test
    void aPeerClaimingANegativePayloadFailsTheGroupNamingIt() throws Exception {
        String why = rankZeroMeetsFakePeer(new Frame().head(0, "allGather(float[3])").ints(-8).bytes());
        assertTrue(why.contains("sent a payload of -8 bytes"), why);
    }

    @Test
    void aPeerSendingAnotherCollectiveOrAHugeNameFailsTheGroup() throws Exception {
        assertTrue(rankZeroMeetsFakePeer(new Frame().head(0, "sumGradients(float[3])").ints(12).raw(new byte[12]).bytes())
                .startsWith("collective mismatch: rank 1 (/127.0.0.1:"));
        byte[] hugeName = {0, 0, 0, 0, 0, 0, 0, 0, (byte) 0xff, (byte) 0xfe};
        assertTrue(rankZeroMeetsFakePeer(hugeName).contains("sent a collective name of 65534 bytes"));
    }

    @Test
    void aPeerThatClosesMidFrameIsReportedAsGone() throws Exception {
        int port = CommunicatorTest.freePort();
        Future<TcpCommunicator> root = pool.submit(() -> TcpCommunicator.connect(launch(0, 2, port, Duration.ofSeconds(20))));
        Socket fake = connectWhenListening(port);
        DataOutputStream o = new DataOutputStream(fake.getOutputStream());
        TcpFrames.writeHello(o, 1, 2);
        o.flush();
        TcpFrames.readWelcome(new DataInputStream(fake.getInputStream()), "fake rank 1", "rank 0");
        TcpCommunicator r0 = root.get(20, TimeUnit.SECONDS);
        o.write(new Frame().head(0, "allGather(float[3])").ints(12).raw(new byte[5]).bytes());  // 5 of 12 bytes, then gone
        o.flush();
        fake.close();
        CommunicatorException e = assertThrows(CommunicatorException.class, () -> r0.allGather(new float[] {1, 2, 3}));
        assertTrue(e.getMessage().contains("rank 1 closed its connection"), e.getMessage());
        r0.close();
    }

    /** MAMBA4J_DIST_TIMEOUT_SECONDS of 40 days: more milliseconds than an int holds, still a working group. */
    @Test
    void aTimeoutBeyondAnIntOfMillisecondsWorks() throws Exception {
        int port = CommunicatorTest.freePort();
        LaunchConfig zero = LaunchConfig.fromEnvironment(java.util.Map.of("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "127.0.0.1",
                "MASTER_PORT", "" + port, "MAMBA4J_DIST_TIMEOUT_SECONDS", "" + 40 * 86_400));
        Future<TcpCommunicator> root = pool.submit(() -> TcpCommunicator.connect(zero));
        try (TcpCommunicator one = TcpCommunicator.connect(launch(1, 2, port, zero.timeout()));
                TcpCommunicator r0 = root.get(20, TimeUnit.SECONDS)) {
            Future<double[]> g0 = pool.submit(() -> r0.allGather(new double[] {1}));
            assertArrayEquals(new double[] {1, 2}, one.allGather(new double[] {2}));
            assertArrayEquals(new double[] {1, 2}, g0.get(20, TimeUnit.SECONDS));
        }
    }

    /** A fake rank 0 that welcomes rank 1 and answers its first collective with {@code reply}. */
    private String rankOneMeetsFakeRankZero(byte[] welcome, byte[] reply) throws Exception {
        try (ServerSocket server = new ServerSocket(0)) {
            int port = server.getLocalPort();
            Future<float[]> one = pool.submit(() -> {
                try (TcpCommunicator c = TcpCommunicator.connect(launch(1, 2, port, Duration.ofSeconds(20)))) {
                    return c.allGather(new float[] {1, 2, 3});
                }
            });
            try (Socket s = server.accept()) {
                DataInputStream in = new DataInputStream(s.getInputStream());
                assertEquals(new TcpFrames.Hello(M, TcpFrames.VERSION, 1, 2), TcpFrames.readHello(in));
                s.getOutputStream().write(welcome);
                if (reply != null) {
                    assertEquals(12, TcpFrames.readPart(in, "rank 1", 0, "allGather(float[3])", Size.exactly(12)).length);
                    s.getOutputStream().write(reply);
                }
                ExecutionException e = assertThrows(ExecutionException.class, () -> one.get(20, TimeUnit.SECONDS));
                assertInstanceOf(CommunicatorException.class, e.getCause());
                return e.getCause().getMessage();
            }
        }
    }

    @Test
    void aFakeRankZeroIsRefused() throws Exception {
        String notOurs = rankOneMeetsFakeRankZero("HTTP/1.1 400 Bad".getBytes(StandardCharsets.US_ASCII), null);
        assertTrue(notOurs.matches("rank 1: 127\\.0\\.0\\.1:[0-9]+ is not a mamba4j rendezvous"), notOurs);
        byte[] welcome = new Frame().ints(M, 0).bytes();
        String negative = rankOneMeetsFakeRankZero(welcome, new Frame().head(0, "allGather(float[3])").ints(-1).bytes());
        assertEquals("rank 0 sent a payload of -1 bytes for allGather(float[3]), expected 24 bytes", negative);
        String huge = rankOneMeetsFakeRankZero(welcome, new Frame().head(0, "allGather(float[3])").ints(1 << 30).bytes());
        assertEquals("rank 0 sent a payload of 1073741824 bytes for allGather(float[3]), expected 24 bytes", huge);
    }
}
