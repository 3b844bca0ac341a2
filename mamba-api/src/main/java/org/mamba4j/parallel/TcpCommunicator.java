package org.mamba4j.parallel;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.function.IntFunction;
import org.mamba4j.Trainer;
import org.mamba4j.parallel.TcpFrames.Size;

/**
 * One process per rank over TCP, written with the JDK: a rendezvous (rank 0 listens on {@code MASTER_PORT}, the
 * others connect to {@code MASTER_ADDR}, {@link LaunchConfig}) and then collectives through rank 0 — every rank
 * sends its part, rank 0 combines the parts in rank order and sends the result back. Host arrays only: the CPU
 * transport for several processes or hosts, and the bootstrap of {@link NcclCommunicator} (it hands NCCL's unique id
 * to every rank).
 *
 * <p>Faults: each collective (and the rendezvous) has a deadline of {@link LaunchConfig#timeout()}: rank 0 waits at
 * most that for every part; past it, or when a peer's connection closes (a killed process), it throws
 * {@link CommunicatorException} naming the rank and why, tells the others (an abort message) and closes every
 * connection, so they fail at once with that reason. The other ranks wait for rank 0's answer at most the timeout plus
 * half of it (≤ 10 s more), so rank 0's verdict normally reaches them first; a dead or hung rank 0 is reported as such. A rank that never connects fails rank 0's rendezvous with its rank
 * named; a rank that cannot reach rank 0 fails naming the address.
 *
 * <p>Bad peers: nothing read from a socket is trusted ({@code TcpFrames} decodes it). Every payload must have the length
 * the collective implies (what each rank sends, what rank 0 answers), checked before anything is allocated for it; a
 * frame of another collective, another length, or an over-long or malformed name fails the group with
 * {@link CommunicatorException} naming the peer (and, on rank 0, its address) and what was wrong. During the
 * rendezvous rank 0 drops a connection that does not send a hello within 5 s or does not start
 * with the magic (a port probe, a stranger), and keeps waiting for the ranks; a hello with the magic but another
 * protocol version, world size, an out-of-range or taken rank ends the rendezvous with that reason. There is no
 * authentication (as with torchrun's rendezvous): a process that reaches {@code MASTER_PORT} first can claim a free
 * rank, so run jobs on a network only they use.
 */
public final class TcpCommunicator implements Communicator {
    /** How long rank 0 waits for a new connection's hello before it drops it (a port probe, a stranger). */
    static final int HELLO_MILLIS = 5_000;
    private static final ScheduledExecutorService WATCHDOG = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "mamba4j-tcp-communicator-watchdog");
        t.setDaemon(true);
        return t;
    });

    private final int rank, world;
    private final long timeoutMillis;
    private final Socket[] peers;  // rank 0: peers[r] for r ≥ 1; others: peers[0] = rank 0
    private final DataInputStream[] in;
    private final DataOutputStream[] out;
    private long sequence;
    private volatile String broken;
    private volatile boolean timedOut, closed;

    private TcpCommunicator(LaunchConfig c, Socket[] peers) throws IOException {
        this.rank = c.rank();
        this.world = c.worldSize();
        this.timeoutMillis = Math.max(1, c.timeout().toMillis());
        this.peers = peers;
        this.in = new DataInputStream[peers.length];
        this.out = new DataOutputStream[peers.length];
        for (int i = 0; i < peers.length; i++)
            if (peers[i] != null) {
                in[i] = new DataInputStream(new BufferedInputStream(peers[i].getInputStream(), 1 << 16));
                out[i] = new DataOutputStream(new BufferedOutputStream(peers[i].getOutputStream(), 1 << 16));
            }
    }

    /**
     * Joins the job's rendezvous: rank 0 listens on the port until every other rank connected (each says its rank and
     * the world size it was launched with), the others connect, retrying until rank 0 listens. Returns when all
     * {@code worldSize} ranks are connected.
     *
     * @throws CommunicatorException when the rendezvous does not complete within the timeout (a rank never came, rank 0
     *     is unreachable), the port is taken, or the ranks disagree (a duplicate rank, another world size)
     */
    public static TcpCommunicator connect(LaunchConfig config) {
        Objects.requireNonNull(config, "config");
        try {
            return config.rank() == 0 ? listen(config) : join(config);
        } catch (IOException e) {
            throw new CommunicatorException("rank " + config.rank() + ": the rendezvous at " + config.masterAddr() + ":"
                    + config.masterPort() + " failed: " + e, e);
        }
    }

    private static TcpCommunicator listen(LaunchConfig c) throws IOException {
        long deadline = System.nanoTime() + c.timeout().toNanos();
        Socket[] peers = new Socket[c.worldSize()];
        if (c.worldSize() == 1) return new TcpCommunicator(c, peers);
        try (ServerSocket server = new ServerSocket()) {
            server.setReuseAddress(true);
            try {
                server.bind(new InetSocketAddress(c.masterPort()));
            } catch (IOException e) {
                throw new CommunicatorException("rank 0 cannot listen on port " + c.masterPort() + " (MASTER_PORT): " + e, e);
            }
            int joined = 0;
            while (joined < c.worldSize() - 1) {
                server.setSoTimeout(remainingMillis(deadline));
                Socket s;
                try {
                    s = server.accept();
                } catch (SocketTimeoutException e) {
                    List<Integer> missing = new ArrayList<>();
                    for (int r = 1; r < peers.length; r++) if (peers[r] == null) missing.add(r);
                    String why = "ranks " + missing + " did not join the rendezvous on port " + c.masterPort() + " within "
                            + c.timeout().toMillis() + " ms";
                    refuseAll(peers, why);
                    throw new CommunicatorException("rank 0: " + why);
                }
                s.setTcpNoDelay(true);
                // A rank sends its hello as soon as it connects: a connection silent for HELLO_MILLIS is dropped, so
                // a stranger holds the rendezvous up for at most that, never until the deadline.
                s.setSoTimeout(Math.min(HELLO_MILLIS, remainingMillis(deadline)));
                TcpFrames.Hello hello;
                try {
                    hello = TcpFrames.readHello(new DataInputStream(s.getInputStream()));
                } catch (IOException e) {
                    s.close();  // not one of ours (a port probe), or a rank that died while connecting: keep waiting
                    continue;
                }
                if (hello.magic() != TcpFrames.MAGIC) {
                    s.close();
                    continue;
                }
                String refusal = TcpFrames.refusal(hello, c.worldSize(), r -> peers[r] != null);
                if (refusal != null) {
                    refuse(s, refusal);
                    refuseAll(peers, refusal);
                    throw new CommunicatorException("rank 0: the rendezvous failed: " + refusal);
                }
                peers[hello.rank()] = s;
                joined++;
            }
        }
        for (Socket s : peers)
            if (s != null) {
                DataOutputStream o = new DataOutputStream(s.getOutputStream());
                TcpFrames.writeWelcome(o);
                o.flush();
            }
        return new TcpCommunicator(c, peers);
    }

    private static TcpCommunicator join(LaunchConfig c) throws IOException {
        long deadline = System.nanoTime() + c.timeout().toNanos();
        Socket s = null;
        IOException last = null;
        while (s == null) {
            if (System.nanoTime() > deadline)
                throw new CommunicatorException("rank " + c.rank() + " could not reach rank 0 at " + c.masterAddr() + ":"
                        + c.masterPort() + " within " + c.timeout().toMillis() + " ms (" + last + ")");
            Socket attempt = new Socket();
            try {
                attempt.connect(new InetSocketAddress(c.masterAddr(), c.masterPort()), Math.min(2000, remainingMillis(deadline)));
                s = attempt;
            } catch (IOException e) {  // rank 0 is not listening yet
                attempt.close();
                last = e;
                sleep(100);
            }
        }
        s.setTcpNoDelay(true);
        try {
            DataOutputStream o = new DataOutputStream(s.getOutputStream());
            TcpFrames.writeHello(o, c.rank(), c.worldSize());
            o.flush();
            s.setSoTimeout(remainingMillis(deadline));
            TcpFrames.readWelcome(new DataInputStream(s.getInputStream()), "rank " + c.rank(), c.masterAddr() + ":" + c.masterPort());
        } catch (CommunicatorException e) {
            s.close();
            throw e;
        } catch (SocketTimeoutException e) {
            s.close();
            throw new CommunicatorException("rank " + c.rank() + ": the rendezvous did not complete within "
                    + c.timeout().toMillis() + " ms (a rank never joined rank 0)");
        } catch (IOException e) {
            s.close();
            throw new CommunicatorException("rank " + c.rank() + ": rank 0 closed the connection during the rendezvous (" + e + ")");
        }
        Socket[] peers = {s};
        return new TcpCommunicator(c, peers);
    }

    @Override
    public int rank() {
        return rank;
    }

    @Override
    public int worldSize() {
        return world;
    }

    @Override
    public float[] allGather(float[] values) {
        Objects.requireNonNull(values, "values");
        byte[] mine = bytes(values);
        return floats(collective("allGather(float[" + values.length + "])", mine, r -> Size.exactly(mine.length),
                Size.exactly((long) world * mine.length), TcpCommunicator::concat));
    }

    @Override
    public double[] allGather(double[] values) {
        Objects.requireNonNull(values, "values");
        ByteBuffer b = ByteBuffer.allocate(Math.multiplyExact(values.length, 8)).order(ByteOrder.LITTLE_ENDIAN);
        b.asDoubleBuffer().put(values);
        int n = b.capacity();
        byte[] all = collective("allGather(double[" + values.length + "])", b.array(), r -> Size.exactly(n),
                Size.exactly((long) world * n), TcpCommunicator::concat);
        double[] out = new double[all.length / 8];
        ByteBuffer.wrap(all).order(ByteOrder.LITTLE_ENDIAN).asDoubleBuffer().get(out);
        return out;
    }

    @Override
    public void broadcast(float[] data, int root) {
        Objects.requireNonNull(data, "data");
        checkRoot(root);
        byte[] mine = rank == root ? bytes(data) : new byte[0];
        Size all = Size.exactly(4L * data.length);
        float[] got = floats(collective("broadcast(float[" + data.length + "], root " + root + ")", mine,
                r -> r == root ? all : Size.exactly(0), all, parts -> parts[root]));
        System.arraycopy(got, 0, data, 0, data.length);
    }

    /** Root's bytes, at most {@code maxLength} of them, on every rank (the NCCL unique id); the others pass any array. */
    byte[] broadcastBytes(byte[] data, int root, int maxLength) {
        checkRoot(root);
        if (rank == root && data.length > maxLength)
            throw new IllegalArgumentException(data.length + " bytes to broadcast, at most " + maxLength);
        Size bound = Size.atMost(maxLength);
        return collective("broadcastBytes(root " + root + ")", rank == root ? data : new byte[0],
                r -> r == root ? bound : Size.exactly(0), bound, parts -> parts[root]);
    }

    /** Rank 0 folds the parts in rank order and sends the sum back: each rank receives n floats, not N·n. */
    @Override
    public void sumGradients(Trainer replica, Reduction reduction) {
        Objects.requireNonNull(replica, "replica");
        float[] local = replica.gradients();
        byte[] mine = bytes(local);
        Size size = Size.exactly(mine.length);
        byte[] sum = collective("sumGradients(float[" + local.length + "])", mine, r -> size, size, parts -> {
            List<float[]> fs = new ArrayList<>();
            for (byte[] p : parts) fs.add(floats(p));
            return bytes(RankOrderSum.fold(fs));
        });
        replica.setGradients(floats(sum));
    }

    @Override
    public void abort(String reason) {
        fail("rank " + rank + " aborted: " + reason, null);
    }

    @Override
    public void close() {
        if (closed) return;
        closed = true;
        if (broken == null) broken = "rank " + rank + " closed its communicator";
        closeSockets();
    }

    // ---- the collective: parts to rank 0, its combination back ----

    /**
     * One collective: {@code part.apply(r)} is the payload rank r must send (rank 0 checks it), {@code reply} the one
     * rank 0 answers with (the others check it), so no frame can make a rank allocate more than the call expects.
     */
    private synchronized byte[] collective(String op, byte[] mine, IntFunction<Size> part, Size reply,
            Function<byte[][], byte[]> combine) {
        if (closed) throw new IllegalStateException("rank " + rank + "'s communicator is closed");
        if (broken != null) throw new CommunicatorException("rank " + rank + ": the group is broken (" + broken + ")");
        long seq = sequence++;
        if (world == 1) return combine.apply(new byte[][] {mine});
        timedOut = false;
        // Rank 0 reads against the deadline and, past it, tells the others why; the others wait a grace period longer,
        // so that verdict reaches them first. The watchdog closes the sockets of a read or write stuck past that.
        long limit = rank == 0 ? timeoutMillis : leafTimeoutMillis();
        ScheduledFuture<?> watchdog = WATCHDOG.schedule(() -> {
            timedOut = true;
            closeSockets();
        }, rank == 0 ? 2 * limit : limit, TimeUnit.MILLISECONDS);
        try {
            return rank == 0 ? root(seq, op, mine, part, combine, System.nanoTime() + timeoutMillis * 1_000_000)
                    : leaf(seq, op, mine, reply);
        } finally {
            watchdog.cancel(false);
        }
    }

    /** How long a rank other than 0 waits for rank 0's answer: the timeout plus a grace of half of it (at most 10 s). */
    private long leafTimeoutMillis() {
        return timeoutMillis + Math.min(timeoutMillis / 2, 10_000);
    }

    private byte[] root(long seq, String op, byte[] mine, IntFunction<Size> part, Function<byte[][], byte[]> combine,
            long deadline) {
        byte[][] parts = new byte[world][];
        parts[0] = mine;
        for (int r = 1; r < world; r++) {
            try {
                peers[r].setSoTimeout(remainingMillis(deadline));
                parts[r] = TcpFrames.readPart(in[r], "rank " + r + " (" + peers[r].getRemoteSocketAddress() + ")", seq, op, part.apply(r));
            } catch (CommunicatorException e) {  // a frame against the protocol: a mismatched call, a bad size
                throw fail(e.getMessage(), null);
            } catch (IOException e) {
                throw fail(timedOut || e instanceof SocketTimeoutException
                        ? "rank " + r + " did not reach " + op + " within " + timeoutMillis + " ms: it is dead or hung"
                        : "rank " + r + " closed its connection before " + op + " (the process died?): " + e, e);
            }
        }
        byte[] reply = combine.apply(parts);
        for (int r = 1; r < world; r++) {
            try {
                writeFrame(out[r], seq, op, reply);
            } catch (IOException e) {
                throw fail(timedOut ? "rank " + r + " did not take the result of " + op + " within " + timeoutMillis + " ms"
                        : "rank " + r + " closed its connection during " + op + ": " + e, e);
            }
        }
        return reply;
    }

    private byte[] leaf(long seq, String op, byte[] mine, Size reply) {
        try {
            writeFrame(out[0], seq, op, mine);
            peers[0].setSoTimeout((int) Math.min(Integer.MAX_VALUE, leafTimeoutMillis()));  // timeouts past 24 days too
            return TcpFrames.readReply(in[0], seq, op, reply);
        } catch (CommunicatorException e) {  // rank 0 aborted, or answered against the protocol
            throw fail(e.getMessage(), null);
        } catch (IOException e) {
            throw fail(timedOut || e instanceof SocketTimeoutException
                    ? "rank " + rank + ": rank 0 did not answer " + op + " within " + leafTimeoutMillis()
                            + " ms (rank 0, or a rank it waits for, is dead or hung)"
                    : "rank " + rank + ": rank 0 closed the connection during " + op + " (it died or aborted): " + e, e);
        }
    }

    private static void writeFrame(DataOutputStream o, long seq, String op, byte[] payload) throws IOException {
        TcpFrames.writeFrame(o, seq, op, payload);
        o.flush();
    }

    /** Marks the group broken; rank 0 tells the other ranks why; closes every connection. Returns the exception to throw. */
    private CommunicatorException fail(String why, Throwable cause) {
        if (broken == null) {
            broken = why;
            if (rank == 0)
                for (int r = 1; r < world; r++) {
                    try {
                        if (out[r] != null && !timedOut) writeFrame(out[r], -1, why, new byte[0]);
                    } catch (IOException ignored) {
                        // that rank is gone already
                    }
                }
            closeSockets();
        }
        return cause == null ? new CommunicatorException(why) : new CommunicatorException(why, cause);
    }

    private void closeSockets() {
        for (Socket s : peers) {
            if (s == null) continue;
            try {
                s.close();
            } catch (IOException ignored) {
                // closing
            }
        }
    }

    private static void refuse(Socket s, String why) {
        try (s) {
            DataOutputStream o = new DataOutputStream(s.getOutputStream());
            TcpFrames.writeRefusal(o, why);
            o.flush();
        } catch (IOException ignored) {
            // it will see the connection close
        }
    }

    private static void refuseAll(Socket[] peers, String why) {
        for (Socket s : peers) if (s != null) refuse(s, why);
    }

    private void checkRoot(int root) {
        if (root < 0 || root >= world) throw new IllegalArgumentException("root = " + root + " must be in [0, " + world + ")");
    }

    private static int remainingMillis(long deadline) {
        long ms = (deadline - System.nanoTime()) / 1_000_000;
        return (int) Math.max(1, Math.min(Integer.MAX_VALUE, ms));
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new CommunicatorException("interrupted while waiting for rank 0");
        }
    }

    private static byte[] concat(byte[][] parts) {
        int n = 0;
        for (byte[] p : parts) n += p.length;
        byte[] all = new byte[n];
        int off = 0;
        for (byte[] p : parts) {
            System.arraycopy(p, 0, all, off, p.length);
            off += p.length;
        }
        return all;
    }

    private static byte[] bytes(float[] v) {
        ByteBuffer b = ByteBuffer.allocate(Math.multiplyExact(v.length, 4)).order(ByteOrder.LITTLE_ENDIAN);
        b.asFloatBuffer().put(v);
        return b.array();
    }

    private static float[] floats(byte[] b) {
        float[] v = new float[b.length / 4];
        ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(v);
        return v;
    }

    @Override
    public String toString() {
        return "TcpCommunicator{rank " + rank + " of " + world + "}";
    }
}
