package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Random;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Mamba-1 inference on a CUDA device against the CPU backend and against itself (graphs, prefill,
 * batching, precision), plus device-memory behaviour. Skipped where no CUDA device is usable.
 * Every test draws fresh random weights and inputs; the seed is printed in failure messages.
 */
@Tag("gpu")
class GpuInferenceTest {
    private static final long SEED = System.nanoTime();

    @BeforeAll
    static void needsGpu() {
        Assumptions.assumeTrue(Device.cudaCount() > 0, () -> "no CUDA device: " + Device.cudaUnavailableReason());
    }

    private static Mamba1Config config(int dModel, int layers, int dState) {
        return Mamba1Config.builder().dModel(dModel).layers(layers).dState(dState).build();
    }

    private static MambaModel model(Mamba1Config c, int inputDim, Device device, DType dtype) {
        return MambaModel.builder(c).inputDim(inputDim).device(device).dtype(dtype).build();
    }

    private static void copyWeights(MambaModel from, MambaModel to) {
        for (String name : from.parameterNames()) to.setParameter(name, from.getParameter(name));
    }

    private static double cosine(float[] a, float[] b) {
        double ab = 0, aa = 0, bb = 0;
        for (int i = 0; i < a.length; i++) {
            ab += (double) a[i] * b[i];
            aa += (double) a[i] * a[i];
            bb += (double) b[i] * b[i];
        }
        return ab / Math.sqrt(aa * bb);
    }

    private static float[] slice(float[] v, int from, int length) {
        float[] out = new float[length];
        System.arraycopy(v, from, out, 0, length);
        return out;
    }

    /** With a GPU there is no reason: an empty string (JavaCPP hands an empty std::string back as null). */
    @Test
    void noUnavailableReasonWithAGpu() {
        org.junit.jupiter.api.Assertions.assertEquals("", Device.cudaUnavailableReason());
    }

    @Test
    void stateRowsMoveOnTheDevice() {
        Random rng = new Random(SEED);
        try (MambaModel m = model(config(64, 2, 16), 8, Device.cuda(0), DType.BF16);
             MambaState a = m.newState(5);
             MambaState b = m.newState(3)) {
            for (int t = 0; t < 6; t++) m.step(a, TestUtil.random(rng, 5 * 8, 1));
            b.copyRowFrom(2, a, 4);
            org.junit.jupiter.api.Assertions.assertArrayEquals(a.readRow(4), b.readRow(2));
            org.junit.jupiter.api.Assertions.assertArrayEquals(new float[b.rowSize()], b.readRow(0));
        }
    }

    @Test
    void f32MatchesCpuOver64Steps() {
        Random rng = new Random(SEED);
        for (int inputDim : new int[] {0, 24}) {
            Mamba1Config c = config(128, 3, 16);
            int batch = 2;
            try (MambaModel cpu = model(c, inputDim, Device.cpu(), DType.F32);
                 MambaModel gpu = model(c, inputDim, Device.cuda(0), DType.F32);
                 MambaState sc = cpu.newState(batch);
                 MambaState sg = gpu.newState(batch)) {
                TestUtil.randomizeWeights(cpu, rng);
                copyWeights(cpu, gpu);
                for (int t = 0; t < 64; t++) {
                    float[] x = TestUtil.random(rng, batch * cpu.inputWidth(), 1.0);
                    float[] yc = cpu.step(sc, x);
                    float[] yg = gpu.step(sg, x);
                    double rel = TestUtil.relL2(yg, yc);
                    assertTrue(rel < 1e-4, "seed " + SEED + " inputDim " + inputDim + " step " + t + ": rel L2 " + rel);
                }
                double rel = TestUtil.relL2(sg.readRow(1), sc.readRow(1));
                assertTrue(rel < 1e-4, "seed " + SEED + ": state rel L2 " + rel);
            }
        }
    }

    @Test
    void lowPrecisionStaysCloseToF32() {
        Random rng = new Random(SEED + 1);
        Mamba1Config c = config(256, 4, 16);
        int batch = 2;
        try (MambaModel ref = model(c, 0, Device.cuda(0), DType.F32); MambaState sr = ref.newState(batch)) {
            TestUtil.randomizeWeights(ref, rng);
            float[][] xs = new float[64][];
            for (int t = 0; t < 64; t++) xs[t] = TestUtil.random(rng, batch * c.dModel(), 1.0);
            float[] prompt = TestUtil.random(rng, batch * 40 * c.dModel(), 1.0);
            float[] want = null;
            for (float[] x : xs) want = ref.step(sr, x);
            float[] wantFwd = ref.forward(prompt, batch, 40);  // 80 rows: the cuBLAS path
            for (DType dt : new DType[] {DType.BF16, DType.F16, DType.TF32}) {
                try (MambaModel m = model(c, 0, Device.cuda(0), dt); MambaState s = m.newState(batch)) {
                    copyWeights(ref, m);
                    float[] got = null;
                    for (float[] x : xs) got = m.step(s, x);
                    double cos = cosine(got, want);
                    assertTrue(cos >= 0.999, "seed " + SEED + " " + dt + ": cosine after 64 steps " + cos);
                    double cosFwd = cosine(m.forward(prompt, batch, 40), wantFwd);
                    assertTrue(cosFwd >= 0.999, "seed " + SEED + " " + dt + ": forward cosine " + cosFwd);
                }
            }
        }
    }

    @Test
    void graphReplayIsBitExactOver100Steps() {
        Random rng = new Random(SEED + 2);
        for (DType dt : new DType[] {DType.F32, DType.BF16}) {
            for (int batch : new int[] {3, 12}) {  // our gemv, and cuBLAS inside the graph
                Mamba1Config c = config(128, 3, 16);
                try (MambaModel eager = model(c, 16, Device.cuda(0), dt);
                     MambaModel graph = model(c, 16, Device.cuda(0), dt);
                     MambaState se = eager.newState(batch);
                     MambaState sg = graph.newState(batch)) {
                    TestUtil.randomizeWeights(eager, rng);
                    copyWeights(eager, graph);
                    graph.setCudaGraphs(true);
                    assertTrue(graph.cudaGraphs());
                    for (int t = 0; t < 100; t++) {
                        float[] x = TestUtil.random(rng, batch * 16, 1.0);
                        assertArrayEquals(eager.step(se, x), graph.step(sg, x),
                                "seed " + SEED + " " + dt + " B=" + batch + " step " + t);
                    }
                    for (int r = 0; r < batch; r++) assertArrayEquals(se.readRow(r), sg.readRow(r), "state row " + r);
                }
            }
        }
    }

    @Test
    void prefillEqualsStepsForBothScans() {
        Random rng = new Random(SEED + 3);
        Mamba1Config c = config(64, 2, 16);
        int batch = 2;
        for (int steps : new int[] {16, 600}) {  // sequential scan; chunked scan (T >= 128 on a small grid)
            try (MambaModel m = model(c, 0, Device.cuda(0), DType.F32);
                 MambaState sp = m.newState(batch);
                 MambaState ss = m.newState(batch)) {
                TestUtil.randomizeWeights(m, rng);
                int D = c.dModel();
                float[] x = TestUtil.random(rng, batch * steps * D, 1.0);
                float[] yPrefill = m.prefill(sp, x, steps);
                float[] yStep = null;
                for (int t = 0; t < steps; t++) {
                    float[] xt = new float[batch * D];
                    for (int b = 0; b < batch; b++) System.arraycopy(x, (b * steps + t) * D, xt, b * D, D);
                    yStep = m.step(ss, xt);
                }
                double rel = TestUtil.relL2(yPrefill, yStep);
                assertTrue(rel < 1e-5, "seed " + SEED + " T=" + steps + ": prefill vs steps rel L2 " + rel);
                for (int b = 0; b < batch; b++) {
                    double rs = TestUtil.relL2(sp.readRow(b), ss.readRow(b));
                    assertTrue(rs < 1e-5, "seed " + SEED + " T=" + steps + ": state row " + b + " rel L2 " + rs);
                }
                for (int t = 0; t < 10; t++) {  // steps continue from the prefilled state
                    float[] xt = TestUtil.random(rng, batch * D, 1.0);
                    double r2 = TestUtil.relL2(m.step(sp, xt), m.step(ss, xt));
                    assertTrue(r2 < 1e-5, "seed " + SEED + " T=" + steps + ": step " + t + " after prefill rel " + r2);
                }
            }
        }
    }

    @Test
    void forwardEqualsPrefillPerPosition() {
        Random rng = new Random(SEED + 4);
        Mamba1Config c = config(96, 2, 8);
        int batch = 3, steps = 20, D = c.dModel();
        try (MambaModel m = model(c, 0, Device.cuda(0), DType.F32)) {
            TestUtil.randomizeWeights(m, rng);
            float[] x = TestUtil.random(rng, batch * steps * D, 1.0);
            float[] all = m.forward(x, batch, steps);
            assertEquals(batch * steps * D, all.length);
            for (int t : new int[] {0, 1, 7, steps - 1}) {
                float[] prefix = new float[batch * (t + 1) * D];
                for (int b = 0; b < batch; b++)
                    System.arraycopy(x, b * steps * D, prefix, b * (t + 1) * D, (t + 1) * D);
                try (MambaState s = m.newState(batch)) {
                    float[] last = m.prefill(s, prefix, t + 1);
                    for (int b = 0; b < batch; b++) {
                        double rel = TestUtil.relL2(slice(all, (b * steps + t) * D, D), slice(last, b * D, D));
                        assertTrue(rel < 1e-5, "seed " + SEED + ": forward vs prefill at t=" + t + " row " + b + ": " + rel);
                    }
                }
            }
            // forward with a state continues it like steps do
            try (MambaState sf = m.newState(batch); MambaState ss = m.newState(batch)) {
                m.forward(sf, x, batch, steps);
                m.prefill(ss, x, steps);
                float[] xt = TestUtil.random(rng, batch * D, 1.0);
                double rel = TestUtil.relL2(m.step(sf, xt), m.step(ss, xt));
                assertTrue(rel < 1e-5, "seed " + SEED + ": step after forward(state) rel " + rel);
            }
        }
    }

    @Test
    void batchRowsAreIndependent() {
        Random rng = new Random(SEED + 5);
        for (DType dt : new DType[] {DType.F32, DType.BF16}) {
            Mamba1Config c = config(128, 2, 16);
            int batch = 4, D = c.dModel();
            try (MambaModel m = model(c, 0, Device.cuda(0), dt); MambaState big = m.newState(batch)) {
                TestUtil.randomizeWeights(m, rng);
                MambaState[] singles = new MambaState[batch];
                for (int b = 0; b < batch; b++) singles[b] = m.newState(1);
                try {
                    for (int t = 0; t < 12; t++) {
                        float[] x = TestUtil.random(rng, batch * D, 1.0);
                        float[] y = m.step(big, x);
                        for (int b = 0; b < batch; b++) {
                            float[] yb = m.step(singles[b], slice(x, b * D, D));
                            assertArrayEquals(yb, slice(y, b * D, D),
                                    "seed " + SEED + " " + dt + ": row " + b + " of B=4 vs B=1 at step " + t);
                        }
                    }
                } finally {
                    for (MambaState s : singles) s.close();
                }
            }
        }
    }

    @Test
    void oversizedAllocationsThrowAndTheDeviceKeepsWorking() {
        Random rng = new Random(SEED + 6);
        // A state of 2^20 rows of a 1024-wide, 8-layer model: ~1.3 TB.
        Mamba1Config wide = config(1024, 8, 16);
        try (MambaModel m = model(wide, 0, Device.cuda(0), DType.BF16)) {
            OutOfDeviceMemoryException e = assertThrows(OutOfDeviceMemoryException.class, () -> m.newState(1 << 20));
            assertTrue(e.getMessage().contains("out of memory"), e.getMessage());
            try (MambaState s = m.newState(2)) {
                float[] y = m.step(s, TestUtil.random(rng, 2 * 1024, 1.0));
                for (float v : y) assertTrue(Float.isFinite(v));
            }
        }
        // A model of absurd size: d_inner 65536 × 512 layers ≈ 10^13 parameters.
        Mamba1Config absurd = Mamba1Config.builder().dModel(32768).expand(2).layers(512).dState(16).build();
        assertThrows(OutOfDeviceMemoryException.class, () -> model(absurd, 0, Device.cuda(0), DType.F32));
        try (MambaModel m = model(config(64, 2, 16), 0, Device.cuda(0), DType.F32); MambaState s = m.newState(1)) {
            float[] y = m.step(s, TestUtil.random(rng, 64, 1.0));
            for (float v : y) assertTrue(Float.isFinite(v));
        }
    }

    @Test
    void createCloseCyclesDoNotLeakDeviceMemory() {
        Random rng = new Random(SEED + 7);
        Mamba1Config c = config(128, 2, 16);
        Device gpu = Device.cuda(0);
        Runnable cycle = new Runnable() {
            int i;

            @Override
            public void run() {
                DType dt = (i & 1) == 0 ? DType.F32 : DType.BF16;
                try (MambaModel m = model(c, 0, gpu, dt); MambaState s = m.newState(2)) {
                    if (i % 4 < 2) m.setCudaGraphs(true);
                    m.step(s, TestUtil.random(rng, 2 * c.dModel(), 1.0));
                    m.step(s, TestUtil.random(rng, 2 * c.dModel(), 1.0));
                }
                i++;
            }
        };
        for (int i = 0; i < 8; i++) cycle.run();  // warm up: backend, cuBLAS handle, workspaces
        long before = gpu.freeMemory();
        for (int i = 0; i < 1000; i++) cycle.run();
        long after = gpu.freeMemory();
        long lostMiB = (before - after) >> 20;
        assertTrue(before - after <= 4L << 20,
                "1000 create/close cycles lost " + lostMiB + " MiB of device memory (" + before + " -> " + after + ")");
    }
}
