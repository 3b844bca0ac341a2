package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/**
 * libmamba reads a direct FloatBuffer's memory as native floats. {@code ByteBuffer.allocateDirect(n)} is
 * big-endian until told otherwise, so its float view used to be read byte-swapped: silent garbage. Every API
 * taking a FloatBuffer now refuses a buffer that is not in native order, and says how to make one.
 */
class DirectBufferOrderTest {
    private static final int IN = 3, D = 16, B = 2, T = 3;

    private static FloatBuffer direct(int floats, ByteOrder order) {
        return ByteBuffer.allocateDirect(floats * 4).order(order).asFloatBuffer();
    }

    private static ByteOrder foreignOrder() {
        return ByteOrder.nativeOrder() == ByteOrder.BIG_ENDIAN ? ByteOrder.LITTLE_ENDIAN : ByteOrder.BIG_ENDIAN;
    }

    private static void assertRejected(Executable call) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, call);
        assertTrue(e.getMessage().contains(".order(ByteOrder.nativeOrder())"), e.getMessage());
    }

    @Test
    void foreignOrderBuffersAreRejected() {
        try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(D).dState(4).layers(1).build()).inputDim(IN).build();
             MambaState s = m.newState(B)) {
            ByteOrder bad = foreignOrder(), good = ByteOrder.nativeOrder();
            // the default of ByteBuffer.allocateDirect(...).asFloatBuffer() on little-endian machines
            assertRejected(() -> m.step(s, ByteBuffer.allocateDirect(B * IN * 4).asFloatBuffer(), direct(B * D, good)));
            assertRejected(() -> m.step(s, direct(B * IN, bad), direct(B * D, good)));
            assertRejected(() -> m.step(s, direct(B * IN, good), direct(B * D, bad)));
            assertRejected(() -> m.prefill(s, direct(B * T * IN, bad), T, direct(B * D, good)));
            assertRejected(() -> m.prefill(s, direct(B * T * IN, good), T, direct(B * D, bad)));
            assertArrayEquals(new float[s.rowSize()], s.readRow(0), "a rejected call leaves the state untouched");
        }
    }

    @Test
    void nativeOrderBuffersMatchArrays() {
        try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(D).dState(4).layers(1).build()).inputDim(IN).seed(5).build();
             MambaState a = m.newState(B);
             MambaState b = m.newState(B)) {
            float[] prompt = TestUtil.random(new Random(1), B * T * IN, 1), x = TestUtil.random(new Random(2), B * IN, 1);
            float[] expectedLast = m.prefill(a, prompt, T), expectedStep = m.step(a, x);

            FloatBuffer px = direct(prompt.length, ByteOrder.nativeOrder()).put(prompt).flip();
            FloatBuffer y = direct(B * D, ByteOrder.nativeOrder());
            m.prefill(b, px, T, y);
            float[] last = new float[B * D];
            y.get(0, last);
            assertArrayEquals(expectedLast, last);
            m.step(b, direct(x.length, ByteOrder.nativeOrder()).put(x).flip(), y);
            float[] step = new float[B * D];
            y.get(0, step);
            assertArrayEquals(expectedStep, step);
        }
    }
}
