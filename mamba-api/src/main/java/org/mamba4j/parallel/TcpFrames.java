package org.mamba4j.parallel;

import java.io.ByteArrayInputStream;
import java.io.DataInput;
import java.io.DataInputStream;
import java.io.DataOutput;
import java.io.IOException;
import java.io.UTFDataFormatException;
import java.util.function.IntPredicate;

/**
 * The wire format of {@link TcpCommunicator}, decoded with bounds: whoever can reach {@code MASTER_PORT} can send
 * bytes, so nothing read here is trusted. Every size is checked against what the local rank expects before anything
 * is allocated for it; a frame that breaks the format throws {@link CommunicatorException} naming the peer and what
 * was wrong. {@link IOException} means the transport: the data ended (the peer closed), or a read timed out.
 *
 * <pre>
 * hello    (rank r → rank 0)  int magic, int version, int rank, int worldSize
 * welcome  (rank 0 → rank r)  int magic, int 0                     — joined
 *                             int magic, int 1, text reason       — refused, the rendezvous ends
 * frame    (both ways)        long seq, text op, int n, n bytes    — seq −1: rank 0 aborts, op is the reason
 * text                        unsigned short n ≤ MAX_TEXT_BYTES, n bytes of modified UTF-8 (DataOutput.writeUTF)
 * </pre>
 */
final class TcpFrames {
    static final int MAGIC = 0x6d346a64;  // "m4jd"
    static final int VERSION = 1;
    /** The longest collective name or abort reason on the wire; longer reasons are cut when written. */
    static final int MAX_TEXT_BYTES = 8192;
    private static final int MAX_TEXT_CHARS = MAX_TEXT_BYTES / 3;  // modified UTF-8 takes at most 3 bytes a char
    private static final int WELCOME = 0, REFUSED = 1;

    private TcpFrames() {}

    /** The length a payload may have, in bytes. */
    record Size(int min, int max) {
        /** Exactly {@code n} bytes; throws {@link IllegalArgumentException} when no Java array holds that many. */
        static Size exactly(long n) {
            if (n < 0 || n > Integer.MAX_VALUE - 8)
                throw new IllegalArgumentException("a collective of " + n + " bytes does not fit one Java array");
            return new Size((int) n, (int) n);
        }

        static Size atMost(int n) {
            return new Size(0, n);
        }

        boolean allows(int n) {
            return n >= min && n <= max;
        }

        @Override
        public String toString() {
            return min == max ? min + " bytes" : min + " to " + max + " bytes";
        }
    }

    /** What a connecting process says first. */
    record Hello(int magic, int version, int rank, int worldSize) {}

    static void writeHello(DataOutput o, int rank, int worldSize) throws IOException {
        o.writeInt(MAGIC);
        o.writeInt(VERSION);
        o.writeInt(rank);
        o.writeInt(worldSize);
    }

    static Hello readHello(DataInput in) throws IOException {
        return new Hello(in.readInt(), in.readInt(), in.readInt(), in.readInt());
    }

    /**
     * Why rank 0 of a world of {@code worldSize} refuses a hello that carries the magic (null: it joins as
     * {@code hello.rank()}); {@code taken} says which ranks joined already.
     */
    static String refusal(Hello hello, int worldSize, IntPredicate taken) {
        int r = hello.rank(), w = hello.worldSize();
        if (hello.version() != VERSION) return "protocol version " + hello.version() + " (rank 0 speaks " + VERSION + ")";
        if (w != worldSize) return "rank " + r + " was launched with WORLD_SIZE " + w + ", rank 0 with " + worldSize;
        if (r < 1 || r >= worldSize) return "rank " + r + " is outside [1, " + worldSize + ")";
        if (taken.test(r)) return "two processes claim rank " + r;
        return null;
    }

    static void writeWelcome(DataOutput o) throws IOException {
        o.writeInt(MAGIC);
        o.writeInt(WELCOME);
    }

    static void writeRefusal(DataOutput o, String why) throws IOException {
        o.writeInt(MAGIC);
        o.writeInt(REFUSED);
        writeText(o, why);
    }

    /**
     * Reads rank 0's answer to this rank's hello; returns when it joined.
     *
     * @param who this rank and the address it reached, for messages ("rank 2", "10.0.0.1:29500")
     * @throws CommunicatorException when rank 0 refused it, or the answer is not a mamba4j rendezvous's
     */
    static void readWelcome(DataInput in, String who, String address) throws IOException {
        int magic = in.readInt();
        if (magic != MAGIC) throw new CommunicatorException(who + ": " + address + " is not a mamba4j rendezvous");
        int status = in.readInt();
        if (status == REFUSED) throw new CommunicatorException(who + ": rank 0 ended the rendezvous: " + readText(in, "rank 0", "reason"));
        if (status != WELCOME)
            throw new CommunicatorException(who + ": " + address + " answered the rendezvous with status " + status + " (not 0 or 1)");
    }

    static void writeFrame(DataOutput o, long seq, String op, byte[] payload) throws IOException {
        o.writeLong(seq);
        writeText(o, op);
        o.writeInt(payload.length);
        o.write(payload);
    }

    /**
     * Rank 0 reads a peer's part of collective {@code seq} {@code op}: it must be that collective, with a payload of
     * {@code size}.
     *
     * @param peer the sender, for messages ("rank 3 (/10.0.0.4:51234)")
     */
    static byte[] readPart(DataInput in, String peer, long seq, String op, Size size) throws IOException {
        long s = in.readLong();
        String theirs = readText(in, peer, "collective name");
        if (s != seq || !theirs.equals(op))
            throw new CommunicatorException("collective mismatch: " + peer + " called " + theirs + " (#" + s + ") while rank 0 called "
                    + op + " (#" + seq + ")");
        return readPayload(in, peer, op, size);
    }

    /**
     * Another rank reads rank 0's answer to collective {@code seq} {@code op}: that collective with a payload of
     * {@code size}, or an abort (then {@link CommunicatorException} with rank 0's reason).
     */
    static byte[] readReply(DataInput in, long seq, String op, Size size) throws IOException {
        long s = in.readLong();
        String what = readText(in, "rank 0", "collective name");
        if (s < 0) throw new CommunicatorException("rank 0 aborted the group: " + what);
        if (s != seq || !what.equals(op))
            throw new CommunicatorException("collective mismatch: rank 0 answered " + what + " (#" + s + ") to " + op + " (#" + seq + ")");
        return readPayload(in, "rank 0", op, size);
    }

    private static byte[] readPayload(DataInput in, String peer, String op, Size size) throws IOException {
        int n = in.readInt();
        if (!size.allows(n))
            throw new CommunicatorException(peer + " sent a payload of " + n + " bytes for " + op + ", expected " + size);
        byte[] p = new byte[n];
        in.readFully(p);
        return p;
    }

    /** {@link DataOutput#writeUTF}, cut to {@value #MAX_TEXT_BYTES} bytes (a long abort reason). */
    static void writeText(DataOutput o, String s) throws IOException {
        o.writeUTF(s.length() <= MAX_TEXT_CHARS ? s : s.substring(0, MAX_TEXT_CHARS - 1) + "…");
    }

    /** A {@link DataOutput#writeUTF} text of at most {@value #MAX_TEXT_BYTES} bytes. */
    static String readText(DataInput in, String peer, String what) throws IOException {
        int n = in.readUnsignedShort();
        if (n > MAX_TEXT_BYTES)
            throw new CommunicatorException(peer + " sent a " + what + " of " + n + " bytes (at most " + MAX_TEXT_BYTES + ")");
        byte[] utf = new byte[2 + n];
        utf[0] = (byte) (n >>> 8);
        utf[1] = (byte) n;
        in.readFully(utf, 2, n);
        try {
            return new DataInputStream(new ByteArrayInputStream(utf)).readUTF();
        } catch (UTFDataFormatException e) {
            throw new CommunicatorException(peer + " sent a malformed " + what + " (not modified UTF-8)", e);
        }
    }
}
