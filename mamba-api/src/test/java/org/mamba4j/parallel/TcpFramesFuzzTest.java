package org.mamba4j.parallel;

import com.code_intelligence.jazzer.junit.DictionaryEntries;
import com.code_intelligence.jazzer.junit.FuzzTest;
import java.io.ByteArrayInputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import org.junit.jupiter.api.AfterAll;
import org.mamba4j.fuzz.FuzzChecks;
import org.mamba4j.parallel.TcpFrames.Size;

/**
 * Coverage-guided fuzzing of {@link TcpFrames}, what {@link TcpCommunicator} reads from its sockets: an input is the
 * byte stream of one connection — a hello (as rank 0 of a world of 4 reads it, rank 2 taken), rank 0's welcome, two
 * parts of collectives (as rank 0 reads them) and two replies (as another rank reads them). Each stage must end in
 * its value, {@link CommunicatorException} (a frame against the protocol) or {@link EOFException} (the stream ended:
 * what a socket read sees when the peer closes); the next stage reads on. Seeds: {@code TcpFramesFuzzTestInputs}.
 */
class TcpFramesFuzzTest {
    private static final String PEER = "rank 1 (fuzz)";

    @FuzzTest(maxDuration = "5s")  // the build's bounded run; scripts/fuzz.sh runs longer
    @DictionaryEntries({"\"m4jd\"", "\"allGather(double[5])\"", "\"broadcastBytes(root 1)\"", "\"allGather(float[3])\"",
            "\"sumGradients(float[2])\"", "\"\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xff\"", "\"\\x00\\x00\\x00\\x28\""})
    void decode(byte[] data) {
        FuzzChecks.bytes(data, () -> {
            DataInputStream in = new DataInputStream(new ByteArrayInputStream(data));
            boolean ok = stage(() -> {
                TcpFrames.Hello h = TcpFrames.readHello(in);
                if (h.magic() == TcpFrames.MAGIC) TcpFrames.refusal(h, 4, r -> r == 2);
            });
            ok &= stage(() -> TcpFrames.readWelcome(in, "rank 1", "fuzz:29500"));
            ok &= stage(() -> TcpFrames.readPart(in, PEER, 0, "allGather(double[5])", Size.exactly(40)));
            ok &= stage(() -> TcpFrames.readPart(in, PEER, 1, "broadcastBytes(root 1)", Size.atMost(4096)));
            ok &= stage(() -> TcpFrames.readReply(in, 2, "allGather(float[3])", Size.exactly(4 * 3 * 4)));
            ok &= stage(() -> TcpFrames.readReply(in, 3, "sumGradients(float[2])", Size.exactly(8)));
            return ok;
        });
    }

    private interface Stage {
        void run() throws Exception;
    }

    /** False when the stage rejected the stream in a documented way; anything else escapes as a finding. */
    private static boolean stage(Stage s) throws Exception {
        try {
            s.run();
            return true;
        } catch (CommunicatorException | EOFException expected) {
            return false;
        }
    }

    @AfterAll
    static void report() {
        FuzzChecks.report("tcp-frames");
    }
}
