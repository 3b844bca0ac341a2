package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/**
 * How native errors reach Java. JavaCPP rethrows every C++ exception as a plain RuntimeException with the
 * message only, so the kind travels as a tag at the start of the message (libmamba's core/errors.h, see
 * {@link NativeErrors}).
 * Either way: bad arguments are {@link IllegalArgumentException}, bad configurations
 * {@link InvalidConfigException}, never a bare {@link MambaException}.
 */
class NativeErrorsTest {

    /** What JavaCPP throws: a plain RuntimeException raised in a native method. */
    private static RuntimeException fromNative(String message) {
        RuntimeException e = new RuntimeException(message);
        e.setStackTrace(new StackTraceElement[] {new StackTraceElement("org.mamba4j.nativ.Model", "step", null, -2)});
        return e;
    }

    // ---- the tag contract (what libmamba is asked to send) ----

    @Test
    void taggedMessagesMapByKind() {
        RuntimeException e = NativeErrors.translate(fromNative("invalid argument: input has 3 floats, expected 4"), false);
        assertInstanceOf(IllegalArgumentException.class, e);
        assertEquals("input has 3 floats, expected 4", e.getMessage());

        e = NativeErrors.translate(fromNative("out of range: row 5 is out of range [0, 2)"), false);
        assertInstanceOf(IllegalArgumentException.class, e);
        assertEquals("row 5 is out of range [0, 2)", e.getMessage());

        e = NativeErrors.translate(fromNative("invalid argument: dModel = 0 is out of range: must be in [1, 65536]"), true);
        assertInstanceOf(InvalidConfigException.class, e);
        assertEquals("dModel = 0 is out of range: must be in [1, 65536]", e.getMessage());

        e = NativeErrors.translate(fromNative("out of range: vocabSize = 20000000 is out of range"), true);
        assertInstanceOf(InvalidConfigException.class, e);

        e = NativeErrors.translate(fromNative("illegal state: backward needs a forward first"), false);
        assertInstanceOf(IllegalStateException.class, e);
        assertEquals("backward needs a forward first", e.getMessage());

        e = NativeErrors.translate(fromNative("out of memory: cudaMalloc of 8 bytes on cuda:0 failed"), false);
        assertInstanceOf(OutOfDeviceMemoryException.class, e);
        assertEquals("out of memory: cudaMalloc of 8 bytes on cuda:0 failed", e.getMessage());

        e = NativeErrors.translate(fromNative("no CUDA device: no driver"), true);
        assertInstanceOf(DeviceUnavailableException.class, e);

        e = NativeErrors.translate(fromNative("cuBLAS: cublasSgemm failed: 13"), false);
        assertSame(MambaException.class, e.getClass());
        assertEquals("cuBLAS: cublasSgemm failed: 13", e.getMessage());
    }

    @Test
    void untaggedMessagesAreInternalErrors() {
        assertSame(MambaException.class, NativeErrors.translate(fromNative("input has 3 floats, expected 4"), false).getClass());
        assertSame(MambaException.class, NativeErrors.translate(fromNative("no backward has run yet"), true).getClass());
    }

    /** Only JavaCPP's exceptions are native errors: Java exceptions thrown inside a guarded call pass through. */
    @Test
    void javaExceptionsPassThroughUnchanged() {
        RuntimeException plainJava = new RuntimeException("invalid argument: from a user callback");
        assertSame(plainJava, NativeErrors.translate(plainJava, false));
        IllegalStateException closed = new IllegalStateException("this MambaModel is closed");
        assertSame(closed, NativeErrors.translate(closed, false));
    }

    // ---- real native calls ----

    @Test
    void outOfVocabularyTokenIsAnArgumentError() {
        try (MambaModel lm = MambaModel.builder(Mamba1Config.builder().dModel(16).layers(1).build()).vocabSize(8).build();
             MambaState s = lm.newState(1)) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> lm.stepTokens(s, new int[] {8}, new float[8]));
            assertTrue(e.getMessage().contains("token id 8"), e.getMessage());
            assertThrows(IllegalArgumentException.class, () -> lm.forwardTokens(null, new int[] {3, -1}, 1, 2));
        }
    }

    @Test
    void nativeLimitsOfTheBuilderAreConfigErrors() {
        Mamba1Config c = Mamba1Config.builder().dModel(16).layers(1).build();
        long maxInput = ModelConfig.limitMax("inputDim");
        InvalidConfigException e = assertThrows(InvalidConfigException.class,
                () -> MambaModel.builder(c).inputDim((int) maxInput + 1).build());
        assertTrue(e.getMessage().contains("inputDim = " + (maxInput + 1)), e.getMessage());
        long maxVocab = ModelConfig.limitMax("vocabSize");
        assertThrows(InvalidConfigException.class, () -> MambaModel.builder(c).vocabSize((int) maxVocab + 1).build());
        assertThrows(InvalidConfigException.class, () -> MambaModel.builder(c).vocabSize((int) maxVocab + 1).parameterShapes());
    }

    @Test
    void unknownLimitNameIsAnArgumentError() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ModelConfig.limitMax("width"));
        assertTrue(e.getMessage().contains("width"), e.getMessage());
    }

    /** JavaCPP's exceptions really come from a native frame: the discriminator {@link NativeErrors#isNative} relies on it. */
    @Test
    void javacppExceptionsCarryANativeTopFrame() {
        try (MambaModel lm = MambaModel.builder(Mamba1Config.builder().dModel(16).layers(1).build()).vocabSize(8).build();
             MambaState s = lm.newState(1)) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> lm.stepTokens(s, new int[] {9}, new float[8]));
            RuntimeException raw = (RuntimeException) e.getCause();
            assertSame(RuntimeException.class, raw.getClass());
            assertTrue(NativeErrors.isNative(raw), () -> "top frame " + raw.getStackTrace()[0]);
        }
    }
}
