package org.mamba4j;


import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/** GemmModeTest's promises on a CUDA device, for every storage type: batch invariance and run-to-run training. */
@Tag("gpu")
class GpuGemmModeTest {
    @BeforeAll
    static void needsGpu() {
        Assumptions.assumeTrue(Device.cudaCount() > 0, () -> "no CUDA device: " + Device.cudaUnavailableReason());
    }

    @ParameterizedTest
    @EnumSource(DType.class)
    void deterministicDecodeIsBatchInvariant(DType dtype) {
        try (MambaModel m = GemmModeTest.model(Device.cuda(0), dtype, GemmMode.DETERMINISTIC)) {
            GemmModeTest.decodeIsBatchInvariant(m);
            m.setCudaGraphs(true);  // graphs record the mode's kernels: the same bits
            GemmModeTest.decodeIsBatchInvariant(m);
        }
    }

    /**
     * From d_model 256 a one-row decode step runs the chain tile, with in_proj's rmsnorm and conv step inside it: its
     * bits must still be those of every other batch size (TMA tiles, the rmsnorm and conv kernels) and of a prefill.
     */
    @ParameterizedTest
    @EnumSource(value = DType.class, names = {"BF16", "F16"})
    void deterministicOneRowDecodeKeepsTheBitsOfEveryPath(DType dtype) {
        try (MambaModel m = GemmModeTest.model(Device.cuda(0), dtype, GemmMode.DETERMINISTIC, 256)) {
            GemmModeTest.decodeIsBatchInvariant(m);
            GemmModeTest.prefillEqualsItsSteps(m, 1);
            m.setCudaGraphs(true);
            GemmModeTest.decodeIsBatchInvariant(m);
            GemmModeTest.prefillEqualsItsSteps(m, 1);
        }
    }

    @ParameterizedTest
    @EnumSource(GemmMode.class)
    void trainingIsRunToRunIdentical(GemmMode mode) {
        for (DType dtype : new DType[] {DType.F32, DType.BF16})
            GemmModeTest.trainingIsRunToRunIdentical(Device.cuda(0), dtype, mode);
    }

    @ParameterizedTest
    @EnumSource(GemmMode.class)
    void everyModeAgreesWithTheCpuToF32Rounding(GemmMode mode) {
        try (MambaModel cpu = GemmModeTest.model(Device.cpu(), DType.F32, GemmMode.DETERMINISTIC);
             MambaModel gpu = GemmModeTest.model(Device.cuda(0), DType.F32, mode);
             MambaState sc = cpu.newState(9);
             MambaState sg = gpu.newState(9)) {
            java.util.Random rng = new java.util.Random(4);
            for (int t = 0; t < 8; t++) {
                float[] x = TestUtil.random(rng, 9 * GemmModeTest.INPUT, 1.0);
                double rel = TestUtil.relL2(gpu.step(sg, x), cpu.step(sc, x));
                org.junit.jupiter.api.Assertions.assertTrue(rel < 1e-5, mode + " step " + t + ": rel L2 " + rel);
            }
        }
    }
}
