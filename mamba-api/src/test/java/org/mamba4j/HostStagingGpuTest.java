package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * A CUDA model stages its large inputs and outputs in page-locked buffers, which libmamba copies by DMA straight
 * from and into (no staging copy of its own): every call of HostStagingTest's script must give the array path's bits
 * on the GPU too, and the pool must hold page-locked memory. Skipped where no CUDA device is usable.
 */
@Tag("gpu")
class HostStagingGpuTest {
    @BeforeAll
    static void needsGpu() {
        Assumptions.assumeTrue(Device.cudaCount() > 0, () -> "no CUDA device: " + Device.cudaUnavailableReason());
    }

    @Test
    void pinnedStagingGivesTheArrayPathsBits() {
        Device gpu = Device.cuda(0);
        List<float[]> arrays = HostStagingTest.runAll(gpu, false, HostStagingTest::script);
        List<float[]> staged = HostStagingTest.runAll(gpu, true, HostStagingTest::script);
        assertEquals(arrays.size(), staged.size());
        for (int i = 0; i < arrays.size(); i++) assertArrayEquals(arrays.get(i), staged.get(i), "output " + i);
    }

    @Test
    void aCudaPoolKeepsPageLockedBuffers() {
        HostStaging pool = new HostStaging(Device.cuda(0).ordinal());
        float[] x = new float[100_000], out = new float[100_000];
        for (int i = 0; i < x.length; i++) x[i] = i * 0.5f;
        try (HostStaging.Lease l = pool.lease()) {
            l.floats(x).get(out);
        }
        assertArrayEquals(x, out);
        assertTrue(pool.keepsPinned(), "a CUDA model's staging buffers are page-locked");
        assertEquals(HostStaging.PINNED_MAX_KEPT_BYTES, pool.maxKeptBytes());
        pool.close();
        assertEquals(0, pool.keptBytes());
    }
}
