package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.util.Random;
import org.bytedeco.cuda.cublas.cublasContext;
import org.bytedeco.cuda.cudart.CUstream_st;
import org.bytedeco.cuda.global.cublas;
import org.bytedeco.cuda.global.cudart;
import org.bytedeco.javacpp.FloatPointer;
import org.bytedeco.javacpp.Loader;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Zero-copy interop with bytedeco's CUDA presets ({@code org.bytedeco:cuda}, the build for our JavaCPP version;
 * a test-scoped dependency): cudart and cuBLAS called from Java on {@link Tensor#pointer()}, both ways — memory
 * written by cudart is read through our API, and a model step's output tensor is read by cudart and changed by
 * cuBLAS in place. Skipped without a CUDA device. On a GPU machine bytedeco's JNI wrappers need
 * {@code libcudart.so.13} and {@code libcublas.so.13} on the loader path (a CUDA 13 toolkit, or the
 * {@code org.bytedeco:cuda:…:linux-x86_64-redist} jar): without them the test fails and says so.
 */
@Tag("gpu")
class CudaInteropTest {
    @BeforeAll
    static void needsGpu() {
        Assumptions.assumeTrue(Device.cudaCount() > 0, () -> "no CUDA device: " + Device.cudaUnavailableReason());
        try {
            Loader.load(cudart.class);
        } catch (UnsatisfiedLinkError e) {
            fail("bytedeco's cudart did not load (it needs libcudart.so.13: a CUDA 13 toolkit on the loader path, or "
                    + "org.bytedeco:cuda:" + cudaPresetVersion() + ":linux-x86_64-redist): " + e.getMessage(), e);
        }
        check(cudart.cudaSetDevice(0), "cudaSetDevice");
    }

    private static String cudaPresetVersion() {
        Package p = cudart.class.getPackage();
        return p.getImplementationVersion() != null ? p.getImplementationVersion() : "<version>";
    }

    private static void check(int status, String what) {
        if (status != cudart.cudaSuccess) fail(what + ": " + cudart.cudaGetErrorString(status).getString());
    }

    private static void checkBlas(int status, String what) {
        assertEquals(cublas.CUBLAS_STATUS_SUCCESS, status, what);
    }

    private static float[] random(Random rng, int n) {
        float[] v = new float[n];
        for (int i = 0; i < n; i++) v[i] = (float) rng.nextGaussian();
        return v;
    }

    @Test
    void cudaMemcpyIntoATensorIsReadThroughOurApi() {
        float[] data = random(new Random(1), 1000);
        try (Tensor t = Tensor.allocate(Device.cuda(0), DType.F32, 10, 100);
             FloatPointer host = new FloatPointer(data)) {
            assertEquals(4L * data.length, t.pointer().capacity(), "pointer() spans the tensor's bytes");
            check(cudart.cudaMemcpy(t.pointer(), host, t.bytes(), cudart.cudaMemcpyHostToDevice), "cudaMemcpy H2D");
            assertArrayEquals(data, t.toArray(), 0f);
        }
    }

    @Test
    void aStepOnTensorsIsReadByCudartAndEqualsTheArrayPath() {
        Random rng = new Random(2);
        int batch = 2;
        try (MambaModel model = MambaModel.builder(Mamba1Config.defaults()).inputDim(16).device(Device.cuda(0)).seed(3).build();
             MambaState tensorState = model.newState(batch);
             MambaState arrayState = model.newState(batch);
             Tensor x = Tensor.allocate(Device.cuda(0), DType.F32, batch, model.inputWidth());
             Tensor y = Tensor.allocate(Device.cuda(0), DType.F32, batch, model.outputWidth())) {
            float[] expected = null;
            float[] got = new float[batch * model.outputWidth()];
            for (int step = 0; step < 4; step++) {
                float[] in = random(rng, batch * model.inputWidth());
                try (FloatPointer host = new FloatPointer(in)) {       // the input goes in through cudart ...
                    check(cudart.cudaMemcpy(x.pointer(), host, x.bytes(), cudart.cudaMemcpyHostToDevice), "cudaMemcpy x");
                }
                model.step(tensorState, x, y);                          // ... our step reads and writes device memory ...
                try (FloatPointer host = new FloatPointer(got.length)) { // ... and cudart reads the output
                    check(cudart.cudaMemcpy(host, y.pointer(), y.bytes(), cudart.cudaMemcpyDeviceToHost), "cudaMemcpy y");
                    host.get(got);
                }
                assertArrayEquals(y.toArray(), got, 0f, "cudart and Tensor.toArray read the same memory");
                expected = model.step(arrayState, in);
                assertTrue(TestUtil.relL2(got, expected) < 1e-6, "step " + step + ": rel L2 " + TestUtil.relL2(got, expected));
            }
        }
    }

    /**
     * Work queued on the model's own stream is ordered with the model's calls with no host synchronisation in
     * between: an asynchronous copy into the input, then a step, then cuBLAS scaling the output on the same stream.
     */
    @Test
    void workOnTheModelsStreamIsOrderedWithItsCalls() {
        loadCublas();
        Random rng = new Random(5);
        int batch = 3;
        cublasContext handle = new cublasContext();
        checkBlas(cublas.cublasCreate_v2(handle), "cublasCreate");
        try (MambaModel model = MambaModel.builder(Mamba1Config.defaults()).inputDim(64).device(Device.cuda(0)).seed(6).build();
             MambaState tensorState = model.newState(batch);
             MambaState arrayState = model.newState(batch);
             Tensor x = Tensor.allocate(Device.cuda(0), DType.F32, batch, model.inputWidth());
             Tensor y = Tensor.allocate(Device.cuda(0), DType.F32, batch, model.outputWidth());
             FloatPointer three = new FloatPointer(3f)) {
            CUstream_st stream = new CUstream_st(model.cudaStream());
            assertTrue(!stream.isNull(), "a CUDA model has a stream");
            assertEquals(model.cudaStream().address(), model.cudaStream().address(), "the same stream every time");
            checkBlas(cublas.cublasSetStream_v2(handle, stream), "cublasSetStream");
            for (int step = 0; step < 3; step++) {
                float[] in = random(rng, batch * model.inputWidth());
                try (FloatPointer host = new FloatPointer(in)) {
                    check(cudart.cudaMemcpyAsync(x.pointer(), host, x.bytes(), cudart.cudaMemcpyHostToDevice, stream),
                            "cudaMemcpyAsync x");
                    model.step(tensorState, x, y);      // no synchronisation between the copy and the step
                }
                checkBlas(cublas.cublasSscal_v2(handle, (int) y.size(), three, new FloatPointer(y.pointer()), 1), "sscal");
                check(cudart.cudaStreamSynchronize(stream), "cudaStreamSynchronize");
                float[] expected = model.step(arrayState, in);
                float[] got = y.toArray();
                for (int i = 0; i < got.length; i++) got[i] /= 3f;
                double rel = TestUtil.relL2(got, expected);
                assertTrue(rel < 1e-6, "step " + step + ": rel L2 " + rel);
            }
        } finally {
            cublas.cublasDestroy_v2(handle);
        }
    }

    private static void loadCublas() {
        try {
            Loader.load(cublas.class);
        } catch (UnsatisfiedLinkError e) {
            fail("bytedeco's cuBLAS did not load (it needs libcublas.so.13: a CUDA 13 toolkit or libcublas package, or "
                    + "org.bytedeco:cuda:" + cudaPresetVersion() + ":linux-x86_64-redist): " + e.getMessage(), e);
        }
    }

    @Test
    void cublasChangesATensorInPlace() {
        loadCublas();
        Random rng = new Random(4);
        int n = 4096;
        float[] a = random(rng, n), b = random(rng, n);
        cublasContext handle = new cublasContext();
        checkBlas(cublas.cublasCreate_v2(handle), "cublasCreate");
        try (Tensor x = Tensor.of(Device.cuda(0), a, n);
             Tensor y = Tensor.of(Device.cuda(0), b, n);
             FloatPointer alpha = new FloatPointer(2f);
             FloatPointer dot = new FloatPointer(1)) {
            checkBlas(cublas.cublasSaxpy_v2(handle, n, alpha, new FloatPointer(x.pointer()), 1, new FloatPointer(y.pointer()), 1), "saxpy");
            checkBlas(cublas.cublasSdot_v2(handle, n, new FloatPointer(x.pointer()), 1, new FloatPointer(y.pointer()), 1, dot), "sdot");
            check(cudart.cudaDeviceSynchronize(), "cudaDeviceSynchronize");
            float[] out = y.toArray();                         // y = 2·x + y, read through our API
            double expectedDot = 0;
            for (int i = 0; i < n; i++) {
                assertEquals(2f * a[i] + b[i], out[i], 0f, "element " + i);
                expectedDot += (double) a[i] * out[i];
            }
            assertEquals(expectedDot, dot.get(), 1e-4 * Math.abs(expectedDot) + 1e-3, "cublasSdot on two tensors");
        } finally {
            cublas.cublasDestroy_v2(handle);
        }
    }
}
