package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * BF16/F16 weight storage on the CPU: matrices (the embedding and the LM head included) kept in 2 bytes, f32
 * compute. The stated tolerances:
 * <ul>
 *   <li>against an F32 model holding the same (16-bit-rounded) weights: logits rel L2 &lt; 1e-5 — the CPU computes
 *       in f32 on the exactly widened weights, only the summation order differs (measured ≤ 9e-7);</li>
 *   <li>against the F32 model the weights were rounded from: logits rel L2 &lt; 5e-2 (BF16: each weight rounded to
 *       8 significant bits, relative error ≤ 2⁻⁹) and &lt; 5e-3 (F16: 11 bits, ≤ 2⁻¹²), and F16 closer than BF16.
 *       Measured (worst over a prefill and 8 steps): BF16 3.5e-3 (Mamba-1) and 1.5e-2 (Mamba-3, whose randomized
 *       weights amplify the rounding more), F16 4.7e-4 and 1.6e-3.</li>
 * </ul>
 * Also: TF32 on the CPU is F32 bit for bit; a BF16 checkpoint round trip is exact; GEMM_DETERMINISTIC stays batch-
 * and thread-count invariant with 16-bit weights; BF16 models train with f32 masters (the 2-byte copy refreshed
 * after every optimizer step), tracking F32 training.
 */
class CpuBf16Test {
    static final int VOCAB = 300, B = 3, STEPS = 8, PROMPT = 7;

    static ModelConfig mamba1() { return Mamba1Config.builder().dModel(64).layers(2).build(); }

    static ModelConfig mamba3() { return Mamba3Config.builder().dModel(64).layers(2).dState(16).headdim(16).build(); }

    /** A language model with randomized weights (seeded), in dtype. */
    static MambaModel lm(ModelConfig c, boolean tie, DType dtype, long seed) {
        MambaModel m = MambaModel.builder(c).vocabSize(VOCAB).tieEmbeddings(tie).dtype(dtype).seed(seed).build();
        TestUtil.randomizeWeights(m, new Random(seed));
        return m;
    }

    /** The same model with `to`'s storage type: `from`'s values as they are (to rounds them if it is 16-bit). */
    static MambaModel copy(MambaModel from, DType to) {
        MambaModel m = MambaModel.builder(from.config()).vocabSize(VOCAB).tieEmbeddings(from.tieEmbeddings()).dtype(to).build();
        for (String n : from.parameterNames()) m.setParameter(n, from.getParameter(n));
        return m;
    }

    /** Logits of a prefill of B × PROMPT tokens (B·T = 21 rows: the widened-tile products), then STEPS decode steps (fixed-order kernel). */
    static List<float[]> logits(MambaModel m) {
        Random rng = new Random(41);
        List<float[]> out = new ArrayList<>();
        try (MambaState s = m.newState(B)) {
            int[] prompt = new int[B * PROMPT];
            for (int i = 0; i < prompt.length; i++) prompt[i] = rng.nextInt(VOCAB);
            out.add(m.forwardTokens(s, prompt, B, PROMPT));
            for (int t = 0; t < STEPS; t++) {
                int[] ids = new int[B];
                for (int b = 0; b < B; b++) ids[b] = rng.nextInt(VOCAB);
                float[] y = new float[B * VOCAB];
                m.stepTokens(s, ids, y);
                out.add(y);
            }
        }
        return out;
    }

    static double worstRel(List<float[]> got, List<float[]> want) {
        double worst = 0;
        for (int i = 0; i < want.size(); i++) worst = Math.max(worst, TestUtil.relL2(got.get(i), want.get(i)));
        return worst;
    }

    @Test
    void sixteenBitLogitsEqualF32OnTheSameWeights() {
        for (ModelConfig c : new ModelConfig[] {mamba1(), mamba3()})
            for (boolean tie : new boolean[] {true, false})
                for (DType dt : new DType[] {DType.BF16, DType.F16})
                    try (MambaModel low = lm(c, tie, dt, 7); MambaModel f32 = copy(low, DType.F32)) {
                        assertEquals(dt, low.dtype());
                        double rel = worstRel(logits(low), logits(f32));
                        System.out.printf("CpuBf16Test %s tie=%b %s vs F32 on the same weights: rel L2 %.2e%n", c.arch(), tie, dt, rel);
                        assertTrue(rel < 1e-5, c.arch() + " tie=" + tie + " " + dt + ": vs F32 on the rounded weights, rel L2 " + rel);
                    }
    }

    @Test
    void sixteenBitLogitsStayCloseToTheF32Model() {
        for (ModelConfig c : new ModelConfig[] {mamba1(), mamba3()})
            try (MambaModel f32 = lm(c, true, DType.F32, 9); MambaModel bf16 = copy(f32, DType.BF16);
                 MambaModel f16 = copy(f32, DType.F16)) {
                List<float[]> want = logits(f32);
                double relBf16 = worstRel(logits(bf16), want), relF16 = worstRel(logits(f16), want);
                System.out.printf("CpuBf16Test %s vs the F32 model: BF16 rel L2 %.2e, F16 %.2e%n", c.arch(), relBf16, relF16);
                assertTrue(relBf16 < 5e-2 && relBf16 > 0, c.arch() + " BF16 vs F32: rel L2 " + relBf16);
                assertTrue(relF16 < 5e-3 && relF16 > 0, c.arch() + " F16 vs F32: rel L2 " + relF16);
                assertTrue(relF16 < relBf16, c.arch() + ": F16 (" + relF16 + ") should be closer than BF16 (" + relBf16 + ")");
            }
    }

    @Test
    void storageRoundsEveryMatrixAndKeepsVectorsExact() {
        try (MambaModel f32 = lm(mamba1(), false, DType.F32, 5); MambaModel bf16 = copy(f32, DType.BF16)) {
            for (String n : f32.parameterNames()) {
                float[] want = f32.getParameter(n), got = bf16.getParameter(n);
                boolean matrix = f32.parameterShape(n).length == 2 && !n.endsWith("A_log");  // the linear weights, embedding, head
                for (int i = 0; i < want.length; i++) {
                    float expect = matrix ? Float.intBitsToFloat(roundToBf16(Float.floatToRawIntBits(want[i]))) : want[i];
                    assertEquals(Float.floatToRawIntBits(expect), Float.floatToRawIntBits(got[i]), n + "[" + i + "]");
                }
            }
        }
    }

    /** f32 bits → the nearest bf16 (ties to even), as f32 bits. */
    static int roundToBf16(int bits) {
        return (bits + 0x7fff + ((bits >>> 16) & 1)) & 0xffff0000;
    }

    @Test
    void tf32OnTheCpuIsF32() {
        try (MambaModel f32 = lm(mamba1(), true, DType.F32, 11); MambaModel tf32 = copy(f32, DType.TF32)) {
            List<float[]> a = logits(f32), b = logits(tf32);
            for (int i = 0; i < a.size(); i++) assertArrayEquals(a.get(i), b.get(i), "call " + i);
        }
    }

    @Test
    void bf16CheckpointRoundTrip(@TempDir Path dir) {
        Path file = dir.resolve("bf16.safetensors");
        try (MambaModel m = lm(mamba1(), false, DType.BF16, 13)) {
            m.save(file);
            try (MambaModel back = MambaModel.load(file, Device.cpu(), DType.BF16); MambaModel asF32 = MambaModel.load(file)) {
                assertEquals(DType.BF16, back.dtype());
                for (String n : m.parameterNames()) {
                    assertArrayEquals(m.getParameter(n), back.getParameter(n), n + " (BF16 → file → BF16)");
                    assertArrayEquals(m.getParameter(n), asF32.getParameter(n), n + " (BF16 → file → F32: the widened values)");
                }
                List<float[]> a = logits(m), b = logits(back);
                for (int i = 0; i < a.size(); i++) assertArrayEquals(a.get(i), b.get(i), "logits, call " + i);
            }
        }
    }

    @Test
    void deterministicBf16DecodeIsBatchInvariant() {
        for (DType dt : new DType[] {DType.BF16, DType.F16})
            try (MambaModel m = GemmModeTest.model(Device.cpu(), dt, GemmMode.DETERMINISTIC)) {
                GemmModeTest.decodeIsBatchInvariant(m);
            }
    }

    @Test
    void deterministicBf16DecodeIsThreadCountInvariant() {
        int saved = org.mamba4j.nativ.global.libmamba.cpuThreads();
        try (MambaModel m = GemmModeTest.model(Device.cpu(), DType.BF16, GemmMode.DETERMINISTIC)) {
            float[][] got = new float[3][];
            for (int threads = 1; threads <= 3; threads++) {
                org.mamba4j.nativ.global.libmamba.setCpuThreads(threads);
                try (MambaState s = m.newState(40)) {
                    Random rng = new Random(3);
                    for (int t = 0; t < 4; t++) got[threads - 1] = m.step(s, TestUtil.random(rng, 40 * GemmModeTest.INPUT, 1.0));
                }
            }
            assertArrayEquals(got[0], got[1], "1 vs 2 threads");
            assertArrayEquals(got[0], got[2], "1 vs 3 threads");
        } finally {
            org.mamba4j.nativ.global.libmamba.setCpuThreads(saved);
        }
    }

    @Test
    void bf16TrainingIsRunToRunIdenticalInEveryMode() {
        for (GemmMode mode : GemmMode.values()) GemmModeTest.trainingIsRunToRunIdentical(Device.cpu(), DType.BF16, mode);
    }

    /**
     * As TrainerGpuTest.bf16StorageTrainsWithF32MasterWeights, on the CPU: gradients track the F32 model's, the
     * trained weights track the F32 run, and the 2-byte copy is refreshed after every optimizer step (the trainer's
     * forward equals that of a fresh BF16 model given the trained weights, bit for bit).
     */
    @Test
    void bf16TrainsWithF32MasterWeights() {
        Mamba1Config c = Mamba1Config.builder().dModel(32).dState(8).layers(2).build();
        int b = 2, T = 24, in = 8;
        Random rng = new Random(17);
        try (MambaModel h = MambaModel.builder(c).inputDim(in).dtype(DType.BF16).seed(17).build()) {
            TestUtil.randomizeWeights(h, new Random(17));
            try (MambaModel f = MambaModel.builder(c).inputDim(in).build();
                 Trainer t32 = Trainer.builder(f).batch(b).seqLen(T).adamW(AdamW.ofLearningRate(1e-3)).build();
                 Trainer t16 = Trainer.builder(h).batch(b).seqLen(T).adamW(AdamW.ofLearningRate(1e-3)).build()) {
                for (String n : h.parameterNames()) f.setParameter(n, h.getParameter(n));  // the same (rounded) start
                float[] x = TestUtil.random(rng, b * T * in, 1), dy = TestUtil.random(rng, b * T * c.dModel(), 1);
                double fwd = TestUtil.relL2(t16.forward(x), t32.forward(x));
                assertTrue(fwd < 1e-5, "training forward, BF16 storage vs F32 on the same weights: rel L2 " + fwd);
                t32.backward(dy, BackwardOptions.accumulate());
                t16.backward(dy, BackwardOptions.accumulate());
                for (String n : t32.parameterNames()) {
                    double rel = TestUtil.relL2(t16.gradient(n), t32.gradient(n));
                    assertTrue(rel < 1e-4, n + ": gradient, BF16 storage vs F32: rel L2 " + rel);
                }
                t32.zeroGrad();
                t16.zeroGrad();
                for (int k = 0; k < 5; k++) {
                    float[] xs = TestUtil.random(rng, b * T * in, 1), target = TestUtil.random(rng, b * T * c.dModel(), 1);
                    t32.stepMse(xs, target);
                    t16.stepMse(xs, target);
                }
                for (String n : f.parameterNames()) {
                    double rel = TestUtil.relL2(h.getParameter(n), f.getParameter(n));
                    assertTrue(rel < 2e-2, n + ": BF16-trained weights vs F32-trained: rel L2 " + rel);
                }
                try (MambaModel fresh = MambaModel.builder(c).inputDim(in).dtype(DType.BF16).build();
                     Trainer tf = Trainer.builder(fresh).batch(b).seqLen(T).build()) {
                    for (String n : h.parameterNames()) fresh.setParameter(n, h.getParameter(n));
                    assertArrayEquals(tf.forward(x), t16.forward(x), "the trainer's bf16 copy was refreshed after the steps");
                    assertArrayEquals(fresh.forward(x, b, T), h.forward(x, b, T), "the model's bf16 copy too");
                }
            }
        }
    }

    @Test
    void bf16LanguageModelLearns() {
        try (MambaModel m = lm(mamba1(), true, DType.BF16, 21);
             Trainer t = Trainer.builder(m).batch(2).seqLen(16).adamW(AdamW.ofLearningRate(3e-3)).build()) {
            int[] ids = new int[2 * 16], targets = new int[2 * 16];
            for (int i = 0; i < ids.length; i++) {
                ids[i] = (i * 7) % 20;
                targets[i] = ((i + 1) * 7) % 20;
            }
            double first = t.stepTokens(ids, targets).loss(), last = first;
            for (int k = 0; k < 30; k++) last = t.stepTokens(ids, targets).loss();
            assertTrue(last < 0.5 * first, "loss " + first + " → " + last);
        }
    }
}
