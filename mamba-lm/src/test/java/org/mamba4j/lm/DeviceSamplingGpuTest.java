package org.mamba4j.lm;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Tag;
import org.mamba4j.Device;
import org.mamba4j.DeviceSampler;
import org.mamba4j.GemmMode;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaException;
import org.mamba4j.MambaModel;

/**
 * Sampling on CUDA ({@code sample_tokens.cu}) against the Java {@link TokenSampler}: the same token streams and
 * random states for every setting, shape and vocabulary of {@link DeviceSamplerTest#sameStreams} (50,280 included,
 * and tiers past the kernel's shared-memory capacity); {@code stepTokensSample} with and without CUDA graphs equal
 * to stepTokens + the host sampler; {@code generate} on CUDA equal to host-sampled generate; the Generator's device
 * path equal to its host path; rejected rows reported. Skipped where no CUDA device is usable.
 */
@Tag("gpu")
class DeviceSamplingGpuTest {
    @BeforeAll
    static void needsGpu() {
        Assumptions.assumeTrue(Device.cudaCount() > 0, () -> "no CUDA device: " + Device.cudaUnavailableReason());
    }

    @Test
    void cudaSamplerGivesTheHostSamplersTokens() {
        int compared = 0;
        for (int vocab : new int[] {1, 2, 7, 1000, 1024, 1025, 4099}) compared += DeviceSamplerTest.sameStreams(Device.cuda(0), vocab, vocab + 3, 5, 3, vocab);
        compared += DeviceSamplerTest.sameStreams(Device.cuda(0), 50280, 50280, 3, 3, 50280);
        assertTrue(compared > 3000, "compared " + compared);
    }

    @Test
    void stepTokensSampleOnCudaEqualsTheHostSampler() {
        for (boolean graphs : new boolean[] {false, true}) {
            for (GemmMode mode : new GemmMode[] {GemmMode.CUBLAS_FAST, GemmMode.DETERMINISTIC}) {
                try (MambaLM lm = TinyLanguageModels.lm(TinyLanguageModels.mamba1(), Device.cuda(0), mode, false)) {
                    lm.model().setCudaGraphs(graphs);
                    DeviceSamplerTest.stepsAgree(lm);
                }
            }
            try (MambaLM lm = TinyLanguageModels.lm(TinyLanguageModels.mamba3(), Device.cuda(0), GemmMode.CUBLAS_FAST, false)) {
                lm.model().setCudaGraphs(graphs);
                DeviceSamplerTest.stepsAgree(lm);
            }
        }
    }

    @Test
    void generateOnCudaEqualsHostSampledGenerate() {
        for (boolean graphs : new boolean[] {true, false}) {
            try (MambaLM lm = TinyLanguageModels.lm(TinyLanguageModels.mamba1(), Device.cuda(0), GemmMode.CUBLAS_FAST, false)) {
                lm.model().setCudaGraphs(graphs);
                DeviceSamplerTest.generatesAgree(lm);
            }
        }
    }

    @Test
    void generateOnAFullSizeVocabulary() {
        // 50,280 logits, a long generation: device and host sampling agree token for token (graphs on).
        try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(64).dState(8).layers(2).build())
                .vocabSize(50280).device(Device.cuda(0)).seed(5).build();
             MambaLM lm = new MambaLM(m, 50277, null)) {
            m.setCudaGraphs(true);
            Random r = new Random(3);
            int[][] prompts = new int[4][];
            for (int b = 0; b < prompts.length; b++) {
                prompts[b] = new int[b == 3 ? 5 : 12];
                for (int i = 0; i < prompts[b].length; i++) prompts[b][i] = r.nextInt(50277);
            }
            for (Sampling s : new Sampling[] {Sampling.greedy(), Sampling.ofTemperature(1.0).topP(0.95).topK(50).seed(4),
                Sampling.ofTemperature(1.3).minP(0.01).repetitionPenalty(1.2).seed(5), Sampling.ofTemperature(2.0).topP(0.99).seed(6)}) {
                Sampling run = s.maxNewTokens(64);
                lm.setDeviceSampling(true);
                int[][] device = lm.generate(prompts, run, (row, tok) -> { });
                lm.setDeviceSampling(false);
                int[][] host = lm.generate(prompts, run, (row, tok) -> { });
                lm.setDeviceSampling(true);
                for (int b = 0; b < prompts.length; b++) assertArrayEquals(host[b], device[b], run + " row " + b);
            }
        }
    }

    @Test
    void generatorDevicePathEqualsItsHostPath() throws Exception {
        try (MambaLM lm = TinyLanguageModels.lm(TinyLanguageModels.mamba1(), Device.cuda(0), GemmMode.DETERMINISTIC, false)) {
            List<List<Completion>> results = new ArrayList<>();
            for (boolean device : new boolean[] {true, false}) {
                try (Generator gen = Generator.builder(lm).slots(8).prefillChunk(16).deviceSampling(device).build()) {
                    Random rng = new Random(11);
                    List<CompletableFuture<Completion>> fs = new ArrayList<>();
                    for (int i = 0; i < 24; i++) {
                        Sampling s = i % 3 == 0 ? Sampling.greedy() : Sampling.ofTemperature(0.9).topP(0.9).topK(10).seed(i);
                        fs.add(gen.generate(TinyLanguageModels.prompt(rng, 1 + rng.nextInt(40)), s.maxNewTokens(30)));
                    }
                    List<Completion> done = new ArrayList<>();
                    for (CompletableFuture<Completion> f : fs) done.add(f.get(120, TimeUnit.SECONDS));
                    results.add(done);
                }
            }
            for (int i = 0; i < results.get(0).size(); i++)
                assertArrayEquals(results.get(1).get(i).tokens(), results.get(0).get(i).tokens(), "request " + i);
        }
    }

    @Test
    void rejectedRowsAreReportedOnCuda() {
        try (MambaModel m = MambaModel.builder(Mamba1Config.builder().dModel(8).dState(4).layers(1).build())
                .vocabSize(3000).device(Device.cuda(0)).build();
             DeviceSampler ds = m.newSampler(3, 3000)) {
            float[] x = new float[9000];
            x[3000 + 2500] = Float.NaN;
            x[3000 + 2600] = Float.POSITIVE_INFINITY;
            MambaException e = assertThrows(MambaException.class, () -> ds.sample(x, 3000));
            assertTrue(e.getMessage().contains("row 1") && e.getMessage().contains("token 2500") && e.getMessage().contains("NaN"),
                    e.getMessage());
            x[3000 + 2500] = 0f;
            assertTrue(assertThrows(MambaException.class, () -> ds.sample(x, 3000)).getMessage().contains("token 2600"));
            x[3000 + 2600] = 0f;
            java.util.Arrays.fill(x, 6000, 9000, Float.NEGATIVE_INFINITY);
            assertTrue(assertThrows(MambaException.class, () -> ds.sample(x, 3000)).getMessage().contains("row 2"));
            java.util.Arrays.fill(x, 6000, 9000, 0f);
            x[6000 + 17] = 5f;
            assertEquals(17, ds.sample(x, 3000)[2]);  // greedy rows by default
        }
    }
}
