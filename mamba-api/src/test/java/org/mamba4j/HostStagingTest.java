package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.function.Function;
import org.bytedeco.javacpp.FloatPointer;
import org.junit.jupiter.api.Test;
import org.mamba4j.nativ.HostBuffer;

/**
 * Large inputs and outputs go through the model's reusable native buffers (HostStaging) instead of JNI array
 * copies. Every such call must give exactly what the plain-array path gives: the same script of calls runs on two
 * identical models, once with every call on arrays and once with every call staged (the bound set to its extremes),
 * and every output, loss and trained weight must agree bit for bit. Also: several threads on one model, and the
 * default bound.
 */
class HostStagingTest {
    private static final int V = 300, IN = 5;

    /** Runs script on a fresh model with every call on one path; returns everything it produced. */
    private static List<float[]> runAll(boolean staged, Function<MambaModel[], List<float[]>> script) {
        return runAll(Device.cpu(), staged, script);
    }

    /** The same on a device (HostStagingGpuTest: page-locked buffers on CUDA). */
    static List<float[]> runAll(Device device, boolean staged, Function<MambaModel[], List<float[]>> script) {
        long saved = HostStaging.minFloats;
        HostStaging.minFloats = staged ? 0 : Long.MAX_VALUE;
        Mamba1Config c = Mamba1Config.builder().dModel(16).dState(4).layers(2).build();
        try (MambaModel lm = MambaModel.builder(c).vocabSize(V).device(device).seed(7).build();
             MambaModel bb = MambaModel.builder(c).inputDim(IN).device(device).seed(8).build()) {
            return script.apply(new MambaModel[] {lm, bb});
        } finally {
            HostStaging.minFloats = saved;
        }
    }

    static List<float[]> script(MambaModel[] models) {
        MambaModel lm = models[0], bb = models[1];
        List<float[]> out = new ArrayList<>();
        Random rng = new Random(3);
        int B = 3, T = 6;
        int[] ids = new int[B * T];
        for (int i = 0; i < ids.length; i++) ids[i] = rng.nextInt(V);
        float[] x = TestUtil.random(rng, B * T * IN, 1);
        // language model: step, prefill, forward
        try (MambaState s = lm.newState(B)) {
            float[] logits = new float[B * V];
            lm.prefillTokens(s, ids, T, logits);
            out.add(logits.clone());
            lm.stepTokens(s, Arrays.copyOf(ids, B), logits);
            out.add(logits.clone());
        }
        out.add(lm.forwardTokens(null, ids, B, T));
        // backbone: step, prefill, forward
        try (MambaState s = bb.newState(B)) {
            out.add(bb.prefill(s, x, T));
            float[] y = new float[B * 16];
            bb.step(s, Arrays.copyOf(x, B * IN), y);
            out.add(y);
        }
        out.add(bb.forward(x, B, T));
        // training: stepMse, split forward/backward, language-model forward
        try (Trainer t = Trainer.builder(bb).batch(B).seqLen(T).adamW(AdamW.ofLearningRate(1e-2)).build()) {
            float[] target = TestUtil.random(rng, B * T * 16, 1);
            out.add(new float[] {(float) t.stepMse(x, target).loss()});
            float[] y = t.forward(x);
            out.add(y);
            float[] dy = new float[y.length];
            for (int i = 0; i < y.length; i++) dy[i] = 2 * (y[i] - target[i]) / y.length;
            out.add(new float[] {(float) t.backward(dy).gradNorm()});
        }
        try (Trainer t = Trainer.builder(bb).batch(B).seqLen(T).crossEntropyHead(7).adamW(AdamW.ofLearningRate(1e-2))
                .build()) {
            int[] classes = new int[B * T];
            for (int i = 0; i < classes.length; i++) classes[i] = rng.nextInt(7);
            out.add(new float[] {(float) t.stepCrossEntropy(x, classes).loss()});
            out.add(new float[] {(float) t.evaluateCrossEntropy(x, classes).loss()});
        }
        try (Trainer t = Trainer.builder(bb).batch(B).seqLen(T).adamW(AdamW.ofLearningRate(1e-2)).build()) {
            out.add(new float[] {(float) t.step(x, TestUtil.random(rng, B * T * 16, 1)).gradNorm()});
        }
        for (String n : bb.parameterNames()) out.add(bb.getParameter(n));
        try (Trainer t = Trainer.builder(lm).batch(B).seqLen(T).adamW(AdamW.ofLearningRate(1e-2)).build()) {
            float[] logits = t.forwardTokens(ids);
            out.add(logits);
            float[] dl = new float[logits.length];
            for (int i = 0; i < dl.length; i++) dl[i] = logits[i] * 1e-3f;
            out.add(new float[] {(float) t.backwardLogits(dl).gradNorm()});
        }
        for (String n : lm.parameterNames()) out.add(lm.getParameter(n));
        return out;
    }

    @Test
    void everyStagedCallGivesTheArrayPathsBits() {
        List<float[]> arrays = runAll(false, HostStagingTest::script), staged = runAll(true, HostStagingTest::script);
        assertEquals(arrays.size(), staged.size());
        for (int i = 0; i < arrays.size(); i++) {
            assertTrue(arrays.get(i).length > 0);
            assertArrayEquals(arrays.get(i), staged.get(i), "output " + i);
        }
    }

    @Test
    void concurrentCallsOnOneModelGetTheirOwnBuffers() throws Exception {
        long saved = HostStaging.minFloats;
        HostStaging.minFloats = 0;  // every call staged: the pool is shared by the threads
        Mamba1Config c = Mamba1Config.builder().dModel(16).dState(4).layers(1).build();
        try (MambaModel m = MambaModel.builder(c).vocabSize(V).device(Device.cpu()).seed(7).build()) {
            int threads = 6;
            Random rng = new Random(5);
            List<int[]> inputs = new ArrayList<>();
            for (int t = 0; t < threads; t++) inputs.add(new int[] {rng.nextInt(V), rng.nextInt(V), rng.nextInt(V)});
            List<float[]> want = new ArrayList<>();
            for (int[] ids : inputs) {
                try (MambaState s = m.newState(3)) {
                    float[] l = new float[3 * V];
                    m.stepTokens(s, ids, l);
                    want.add(l);
                }
            }
            ExecutorService pool = Executors.newFixedThreadPool(threads);
            try {
                List<Future<float[]>> got = new ArrayList<>();
                for (int[] ids : inputs)
                    got.add(pool.submit(() -> {
                        float[] l = new float[3 * V];
                        for (int k = 0; k < 20; k++) {
                            try (MambaState s = m.newState(3)) {
                                m.stepTokens(s, ids, l);
                            }
                        }
                        return l;
                    }));
                for (int t = 0; t < threads; t++) assertArrayEquals(want.get(t), got.get(t).get(), "thread " + t);
            } finally {
                pool.shutdown();
            }
        } finally {
            HostStaging.minFloats = saved;
        }
    }

    @Test
    void twoModelsOnTwoThreadsKeepTheirOwnPools() throws Exception {
        long saved = HostStaging.minFloats;
        HostStaging.minFloats = 0;  // every call staged
        Mamba1Config c = Mamba1Config.builder().dModel(16).dState(4).layers(1).build();
        try (MambaModel a = MambaModel.builder(c).vocabSize(V).device(Device.cpu()).seed(1).build();
             MambaModel b = MambaModel.builder(c).inputDim(IN).device(Device.cpu()).seed(2).build()) {
            int[] ids = {3, 1, 4, 1};
            float[] x = TestUtil.random(new Random(6), 4 * 9 * IN, 1);
            float[] wantLogits = a.forwardTokens(null, ids, 2, 2), wantY = b.forward(x, 4, 9);
            ExecutorService pool = Executors.newFixedThreadPool(2);
            try {
                Future<Boolean> fa = pool.submit(() -> {
                    boolean same = true;
                    for (int k = 0; k < 50; k++) same &= Arrays.equals(wantLogits, a.forwardTokens(null, ids, 2, 2));
                    return same;
                });
                Future<Boolean> fb = pool.submit(() -> {
                    boolean same = true;
                    for (int k = 0; k < 50; k++) same &= Arrays.equals(wantY, b.forward(x, 4, 9));
                    return same;
                });
                assertTrue(fa.get(), "model a's logits changed while model b ran");
                assertTrue(fb.get(), "model b's outputs changed while model a ran");
            } finally {
                pool.shutdown();
            }
        } finally {
            HostStaging.minFloats = saved;
        }
    }

    /** One staged call's buffers: an input holding x and an output of out.length floats, copied out. */
    static void inOut(HostStaging pool, float[] x, float[] out) {
        try (HostStaging.Lease l = pool.lease()) {
            l.floats(x);
            l.floats(out.length).get(out);
        }
    }

    @Test
    void thePoolKeepsABoundedAmountBetweenCalls() {
        HostStaging pool = new HostStaging();
        float[] small = new float[1000], big = new float[(int) (HostStaging.MAX_KEPT_BYTES / 4) + 1];
        inOut(pool, small, small);
        assertTrue(pool.keptBytes() > 0 && pool.keptBytes() <= HostStaging.MAX_KEPT_BYTES, "small buffers are kept");
        inOut(pool, big, small);  // a buffer over the bound is freed after its call
        assertTrue(pool.keptBytes() <= HostStaging.MAX_KEPT_BYTES, "kept " + pool.keptBytes());
        float[] half = new float[(int) (HostStaging.MAX_KEPT_BYTES / 4 / 2)];
        for (int k = 0; k < 3; k++) inOut(pool, half, half);  // two at a time, 2 × half = the bound
        assertTrue(pool.keptBytes() <= HostStaging.MAX_KEPT_BYTES, "kept " + pool.keptBytes());
        // four buffers of 0.4 × the bound in flight at once (a staged call inside a staged call): only what fits stays
        float[] part = new float[(int) (HostStaging.MAX_KEPT_BYTES / 4 * 2 / 5)];
        try (HostStaging.Lease outer = pool.lease()) {
            outer.floats(part);
            outer.floats(part.length);
            inOut(pool, part, part);
        }
        assertTrue(pool.keptBytes() <= HostStaging.MAX_KEPT_BYTES && pool.keptBytes() > 0, "kept " + pool.keptBytes());
        pool.close();
        assertEquals(0, pool.keptBytes());
        inOut(pool, small, small);  // still usable after close, keeps nothing
        assertEquals(0, pool.keptBytes());
    }

    @Test
    void aHostBufferForTheCpuIsPlainMemoryAndBadSizesThrow() {
        Native.load();
        try (HostBuffer b = new HostBuffer(-1, 1000)) {
            assertEquals(1000, b.bytes());
            assertFalse(b.pinned(), "CPU buffers are plain memory");
            assertFalse(b.data().isNull());
            FloatPointer f = new FloatPointer(b.data()).capacity(250);
            f.put(249, 2.5f);
            assertEquals(2.5f, f.get(249));
        }
        assertThrows(RuntimeException.class, () -> new HostBuffer(-1, -1));
        assertThrows(RuntimeException.class, () -> new HostBuffer(-2, 16));
        if (Device.cudaCount() == 0)  // no GPU: asking for a CUDA device's buffer is an error, not plain memory
            assertThrows(RuntimeException.class, () -> new HostBuffer(0, 16));
        HostStaging cpu = new HostStaging(-1);
        inOut(cpu, new float[1000], new float[1000]);
        assertFalse(cpu.keepsPinned());
        assertEquals(HostStaging.MAX_KEPT_BYTES, cpu.maxKeptBytes());
        cpu.close();
    }

    @Test
    void theDefaultBoundStagesLargeCallsAndRefusesBadOnes() {
        assertEquals(HostStaging.MIN_FLOATS, HostStaging.minFloats);
        Mamba1Config c = Mamba1Config.builder().dModel(16).dState(4).layers(1).build();
        int vocab = 40_000;  // one row below the bound, two rows above it
        MambaModel m = MambaModel.builder(c).vocabSize(vocab).device(Device.cpu()).gemmMode(GemmMode.DETERMINISTIC)
                .seed(7).build();
        MambaState two = m.newState(2), one = m.newState(1);
        float[] both = new float[2 * vocab], alone = new float[vocab];
        m.stepTokens(two, new int[] {11, 39_999}, both);
        m.stepTokens(one, new int[] {11}, alone);
        assertArrayEquals(alone, Arrays.copyOf(both, vocab), "DETERMINISTIC: row 0 alone = row 0 of two (staged)");
        assertThrows(IllegalArgumentException.class, () -> m.stepTokens(two, new int[] {1, 2}, new float[2 * vocab - 1]));
        assertThrows(IllegalArgumentException.class, () -> m.stepTokens(two, new int[] {1, vocab}, new float[2 * vocab]));
        two.close();
        one.close();
        m.close();
        assertThrows(IllegalStateException.class, () -> m.stepTokens(two, new int[] {1, 2}, new float[2 * vocab]));
    }
}
