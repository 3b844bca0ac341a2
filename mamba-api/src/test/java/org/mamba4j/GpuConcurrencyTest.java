package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assertions;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Several models on one GPU, one thread each: every thread's outputs must be bitwise equal to the same work run
 * alone. Each model owns its CUDA context (stream, cuBLAS handle, workspaces, staging, graphs), so nothing one
 * thread does may change another's results — including a CUDA-graph capture running while other threads launch.
 * Mixes decode steps (graphs on and off; batches of 4, and of 1 for some threads), prefill, full forwards, Tensor steps, training steps and close ({@value
 * #ROUNDS} rounds per thread, 2 concurrent trials per thread count); and two threads sharing one model, each with
 * its own state. The CPU twin is {@link ConcurrencyTest}.
 */
@Tag("gpu")
class GpuConcurrencyTest {
    private static final int ROUNDS = 60;

    @BeforeAll
    static void needsGpu() {
        Assumptions.assumeTrue(Device.cudaCount() > 0, () -> "no CUDA device: " + Device.cudaUnavailableReason());
    }

    /** One thread's work: builds its model, runs a seeded mix of calls, returns every output in order. */
    private static List<float[]> work(int id) {
        int[][] shapes = {{256, 4}, {384, 3}, {128, 2}, {192, 5}};
        int[] shape = shapes[id % shapes.length];
        DType dtype = id % 2 == 0 ? DType.F32 : DType.BF16;
        boolean trains = id % 4 == 1;  // some threads train (BF16 with f32 masters), the others infer
        Random rng = new Random(1000 + id);
        List<float[]> out = new ArrayList<>();
        Mamba1Config c = Mamba1Config.builder().dModel(shape[0]).layers(shape[1]).build();
        int inputDim = 32, batch = id % 3 == 2 ? 1 : 4;  // B = 1 decode runs the fused in_proj + conv kernel
        try (MambaModel m = MambaModel.builder(c).inputDim(inputDim).device(Device.cuda(0)).dtype(dtype).seed(id).build();
             MambaState s = m.newState(batch);
             Tensor tx = Tensor.allocate(Device.cuda(0), DType.F32, batch, inputDim);
             Tensor ty = Tensor.allocate(Device.cuda(0), DType.F32, batch, m.outputWidth())) {
            Trainer trainer = trains ? Trainer.builder(m).batch(2).seqLen(8).adamW(AdamW.ofLearningRate(1e-3)).build() : null;
            try {
                for (int round = 0; round < ROUNDS; round++) {
                    if (round % 20 == 0) s.reset();
                    switch (round % 6) {
                        case 0 -> out.add(m.prefill(s, TestUtil.random(rng, batch * 16 * inputDim, 1.0), 16));
                        case 1, 2 -> {
                            m.setCudaGraphs(round % 12 < 6);
                            out.add(m.step(s, TestUtil.random(rng, batch * inputDim, 1.0)));
                        }
                        case 3 -> out.add(m.forward(TestUtil.random(rng, 2 * 8 * inputDim, 1.0), 2, 8));
                        case 4 -> {
                            tx.copyFrom(TestUtil.random(rng, batch * inputDim, 1.0));
                            m.step(s, tx, ty);
                            out.add(ty.toArray());
                        }
                        default -> {
                            if (trainer != null) {
                                StepResult r = trainer.stepMse(TestUtil.random(rng, 2 * 8 * inputDim, 1.0),
                                        TestUtil.random(rng, 2 * 8 * m.outputWidth(), 1.0));
                                out.add(new float[] {(float) r.loss(), (float) r.gradNorm()});
                            } else {
                                out.add(m.step(s, TestUtil.random(rng, batch * inputDim, 1.0)));
                            }
                        }
                    }
                }
            } finally {
                if (trainer != null) trainer.close();
            }
        }
        return out;
    }

    /** A shared model, each thread with its own state: graphs on, steps, prefill and forwards interleaved. */
    private static List<float[]> sharedWork(MambaModel m, int id) {
        Random rng = new Random(500 + id);
        List<float[]> out = new ArrayList<>();
        int batch = 2 + id;
        try (MambaState s = m.newState(batch)) {
            for (int round = 0; round < ROUNDS; round++) {
                switch (round % 3) {
                    case 0 -> out.add(m.prefill(s, TestUtil.random(rng, batch * 8 * m.inputWidth(), 1.0), 8));
                    case 1 -> out.add(m.step(s, TestUtil.random(rng, batch * m.inputWidth(), 1.0)));
                    default -> out.add(m.forward(TestUtil.random(rng, 3 * 4 * m.inputWidth(), 1.0), 3, 4));
                }
            }
        }
        return out;
    }

    @Test
    void twoThreadsSharingOneModelMatchSequentialRuns() throws Exception {
        Mamba1Config c = Mamba1Config.builder().dModel(256).layers(3).build();
        for (DType dtype : new DType[] {DType.F32, DType.BF16}) {
            try (MambaModel m = MambaModel.builder(c).inputDim(16).device(Device.cuda(0)).dtype(dtype).seed(3).build()) {
                m.setCudaGraphs(true);
                List<float[]> a = sharedWork(m, 0), b = sharedWork(m, 1);
                ExecutorService pool = Executors.newFixedThreadPool(2);
                try {
                    Future<List<float[]>> fa = pool.submit(() -> sharedWork(m, 0));
                    Future<List<float[]>> fb = pool.submit(() -> sharedWork(m, 1));
                    List<float[]> ga = fa.get(5, TimeUnit.MINUTES), gb = fb.get(5, TimeUnit.MINUTES);
                    for (int i = 0; i < ROUNDS; i++) {
                        assertArrayEquals(a.get(i), ga.get(i), dtype + " thread 0, output " + i);
                        assertArrayEquals(b.get(i), gb.get(i), dtype + " thread 1, output " + i);
                    }
                } finally {
                    pool.shutdownNow();
                }
            }
        }
    }

    @ParameterizedTest
    @ValueSource(ints = {2, 4, 8})
    void threadsMatchSequentialRunsBitForBit(int threads) throws Exception {
        List<List<float[]>> alone = new ArrayList<>();
        for (int id = 0; id < threads; id++) alone.add(work(id));
        for (int trial = 0; trial < 2; trial++) {
            ExecutorService pool = Executors.newFixedThreadPool(threads);
            try {
                List<Future<List<float[]>>> futures = new ArrayList<>();
                for (int id = 0; id < threads; id++) {
                    final int t = id;
                    futures.add(pool.submit(() -> work(t)));
                }
                for (int id = 0; id < threads; id++) {
                    List<float[]> got = futures.get(id).get(5, TimeUnit.MINUTES);
                    assertEquals(alone.get(id).size(), got.size());
                    for (int i = 0; i < got.size(); i++)
                        assertArrayEquals(alone.get(id).get(i), got.get(i),
                                "trial " + trial + ", thread " + id + " of " + threads + ", output " + i);
                }
            } finally {
                pool.shutdownNow();
                Assertions.assertTimeoutPreemptively(Duration.ofSeconds(30),
                        () -> pool.awaitTermination(30, TimeUnit.SECONDS));
            }
        }
    }
}
