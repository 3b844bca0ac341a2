package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/**
 * Use after close, for every object that owns a native peer: an {@link IllegalStateException} naming the
 * object (never a JavaCPP NullPointerException, never a call into freed memory), idempotent and thread-safe
 * closing, and a state that is unusable once its model is closed.
 */
class LifecycleTest {
    private static final int D = 16, IN = 3, B = 2, T = 4;

    private static MambaModel model() {
        return MambaModel.builder(Mamba1Config.builder().dModel(D).dState(4).layers(1).build()).inputDim(IN).seed(3).build();
    }

    private static void assertClosed(String object, Executable call) {
        IllegalStateException e = assertThrows(IllegalStateException.class, call);
        assertTrue(e.getMessage().contains("this " + object + " is closed"), e.getMessage());
    }

    @Test
    void stateRowOperationsThrowOnceTheirModelIsClosed() {
        MambaModel m = model();
        MambaState s = m.newState(B), other = m.newState(B);
        float[] row = s.readRow(0);
        m.close();
        // the state itself is still open, but it belongs to a closed model
        assertClosed("MambaModel", () -> s.readRow(0));
        assertClosed("MambaModel", () -> s.readRow(1, new float[row.length]));
        assertClosed("MambaModel", () -> s.writeRow(0, row));
        assertClosed("MambaModel", () -> s.resetRow(0));
        assertClosed("MambaModel", s::reset);
        assertClosed("MambaModel", () -> s.copyFrom(other));
        assertEquals(B, s.batch());  // plain Java facts stay readable
        s.close();                   // and closing still frees it
        s.close();
        other.close();
        assertTrue(s.isClosed());
        assertClosed("MambaState", () -> s.readRow(0));
    }

    @Test
    void modelAccessorsAfterCloseThrowIllegalState() {
        MambaModel m = model();
        m.close();
        m.close();
        assertClosed("MambaModel", m::parameterCount);  // was a NullPointerException from JavaCPP
        assertClosed("MambaModel", () -> m.parameterShape("backbone.norm_f.weight"));
        assertClosed("MambaModel", () -> m.setParameter("backbone.norm_f.weight", new float[D]));
        assertClosed("MambaModel", m::cudaGraphs);
        assertClosed("MambaModel", () -> m.setCudaGraphs(true));
        assertEquals(D, m.outputWidth());
    }

    @Test
    void trainerCallsAfterCloseThrowIllegalState() {
        try (MambaModel m = model()) {
            Trainer t = Trainer.builder(m).batch(B).seqLen(T).build();
            OptimizerState saved = t.exportOptimizerState();
            t.close();
            t.close();
            assertClosed("Trainer", () -> t.gradient("backbone.norm_f.weight"));  // was a NullPointerException
            assertClosed("Trainer", () -> t.importOptimizerState(saved));          // was a NullPointerException
            assertClosed("Trainer", t::exportOptimizerState);
            assertClosed("Trainer", t::zeroGrad);
            assertClosed("Trainer", t::learningRate);
            assertClosed("Trainer", () -> t.weightDecay("backbone.norm_f.weight"));
            assertClosed("Trainer", t::snapshot);
            assertClosed("Trainer", () -> t.setStepGraphs(true));
            assertClosed("Trainer", t::stepGraphs);
            assertClosed("Trainer", t::stepGraphsOffReason);
            Trainer t2 = Trainer.builder(m).batch(B).seqLen(T).build();
            m.close();
            assertClosed("MambaModel", () -> t2.gradient("backbone.norm_f.weight"));
            assertClosed("MambaModel", t2::stepCount);
            t2.close();
        }
    }

    @Test
    void tensorAccessorsAfterCloseThrowIllegalState() {
        Tensor t = Tensor.allocate(Device.cpu(), DType.F32, 2, 3);
        t.close();
        assertClosed("Tensor", t::size);
        assertClosed("Tensor", t::bytes);
        assertClosed("Tensor", t::toArray);
        assertEquals(2, t.shape()[0]);
    }

    /**
     * Many threads close the same objects while others use them: every call either works or throws
     * IllegalStateException, nothing crashes, and each peer is freed once.
     */
    @Test
    void closeIsIdempotentAndThreadSafe() throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(8);
        try {
            for (int round = 0; round < 20; round++) {
                MambaModel m = model();
                MambaState s = m.newState(B);
                Trainer t = Trainer.builder(m).batch(B).seqLen(T).build();
                Tensor x = Tensor.allocate(Device.cpu(), DType.F32, B, IN);
                float[] in = TestUtil.random(new Random(round), B * T * IN, 1);
                CountDownLatch start = new CountDownLatch(1);
                List<Future<?>> jobs = new ArrayList<>();
                for (int k = 0; k < 4; k++) {
                    jobs.add(pool.submit(() -> {
                        start.await();
                        for (int i = 0; i < 50; i++) {
                            expectOpenOrClosed(() -> m.step(s, new float[B * IN]));
                            expectOpenOrClosed(() -> s.readRow(1));
                            expectOpenOrClosed(() -> t.forward(in));
                            expectOpenOrClosed(m::parameterCount);
                            expectOpenOrClosed(x::toArray);
                        }
                        return null;
                    }));
                }
                for (AutoCloseable c : new AutoCloseable[] {t, s, x, m, m, x, s, t}) {
                    jobs.add(pool.submit(() -> {
                        start.await();
                        c.close();
                        return null;
                    }));
                }
                start.countDown();
                for (Future<?> f : jobs) f.get(30, TimeUnit.SECONDS);
                assertTrue(m.isClosed() && s.isClosed() && t.isClosed() && x.isClosed());
            }
        } finally {
            pool.shutdownNow();
        }
    }

    private static void expectOpenOrClosed(Runnable call) {
        try {
            call.run();
        } catch (IllegalStateException e) {
            assertTrue(e.getMessage().endsWith(" is closed"), e.getMessage());
        }
    }
}
