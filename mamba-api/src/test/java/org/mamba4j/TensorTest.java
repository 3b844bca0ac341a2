package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Random;
import org.junit.jupiter.api.Test;

/** Tensors on the CPU device (the GPU twin of these checks is in GpuInferenceTest). */
class TensorTest {
    @Test
    void floatAndByteCopiesRoundTrip() {
        float[] v = TestUtil.random(new Random(1), 24, 3);
        try (Tensor t = Tensor.of(Device.cpu(), v, 2, 3, 4)) {
            assertArrayEquals(new long[] {2, 3, 4}, t.shape());
            assertEquals(24, t.size());
            assertEquals(96, t.bytes());
            assertArrayEquals(v, t.toArray(), 0f);
            ByteBuffer raw = ByteBuffer.allocateDirect(96).order(ByteOrder.nativeOrder());
            t.copyTo(raw);
            assertEquals(v[5], raw.getFloat(20));
            raw.putFloat(0, 42f);
            t.copyFrom(raw);
            assertEquals(42f, t.toArray()[0]);
            assertNotEquals(0, t.pointer().address());
            assertEquals(96, t.pointer().capacity());
        }
        try (Tensor h = Tensor.allocate(Device.cpu(), DType.BF16, 4)) {
            assertEquals(8, h.bytes());
            assertThrows(IllegalArgumentException.class, () -> h.copyFrom(new float[4]));
        }
    }

    @Test
    void stepOnTensorsEqualsStepOnArrays() {
        try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(16).layers(2).build()).inputDim(3).seed(2).build();
             MambaState a = m.newState(2); MambaState b = m.newState(2);
             Tensor x = Tensor.allocate(Device.cpu(), DType.F32, 2, 3); Tensor y = Tensor.allocate(Device.cpu(), DType.F32, 2, 16)) {
            Random rng = new Random(3);
            for (int t = 0; t < 5; t++) {
                float[] in = TestUtil.random(rng, 6, 1);
                x.copyFrom(in);
                m.step(b, x, y);
                assertArrayEquals(m.step(a, in), y.toArray(), 0f);
            }
            try (Tensor wrong = Tensor.allocate(Device.cpu(), DType.F32, 5)) {
                assertThrows(IllegalArgumentException.class, () -> m.step(a, wrong, y));
            }
        }
    }

    @Test
    void oversizedAllocationThrowsAndTheNextOneWorks() {
        OutOfDeviceMemoryException e = assertThrows(OutOfDeviceMemoryException.class,
                () -> Tensor.allocate(Device.cpu(), DType.F32, 1L << 24, 1L << 24));  // 1 PiB
        assertEquals(true, e.getMessage().startsWith("out of memory"), e.getMessage());
        try (Tensor ok = Tensor.allocate(Device.cpu(), DType.F32, 1000)) {
            assertEquals(1000, ok.size());
        }
    }

    @Test
    void closedTensorThrows() {
        Tensor t = Tensor.allocate(Device.cpu(), DType.F32, 3);
        t.close();
        t.close();
        assertThrows(IllegalStateException.class, () -> t.copyFrom(new float[3]));
        assertThrows(IllegalStateException.class, t::pointer);
        assertThrows(IllegalArgumentException.class, () -> Tensor.allocate(Device.cpu(), DType.F32, -1));
    }
}
