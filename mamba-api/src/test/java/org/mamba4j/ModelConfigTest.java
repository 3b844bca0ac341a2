package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The architecture-neutral config type, and the facts read from libmamba instead of copied into Java. */
class ModelConfigTest {

    @Test
    void modelConfigIsSealedOverTheArchitectures() {
        assertTrue(ModelConfig.class.isSealed());
        assertArrayEquals(new Class<?>[] {Mamba1Config.class, Mamba3Config.class}, ModelConfig.class.getPermittedSubclasses());
        ModelConfig c = Mamba1Config.builder().dModel(32).layers(2).build();
        assertEquals("mamba1", c.arch());
        assertEquals(32, c.dModel());
        assertEquals(2, c.layers());
        try (MambaModel m = MambaModel.builder(c).inputDim(4).build()) {
            assertSame(c, m.config());
            assertInstanceOf(Mamba1Config.class, m.config());
            assertEquals(32, m.outputWidth());
        }
    }

    @Test
    void limitsComeFromLibmamba() {
        assertEquals(1, ModelConfig.limitMin("dModel"));
        assertEquals(65536, ModelConfig.limitMax("dModel"));
        assertEquals(256, ModelConfig.limitMax("dState"));
        assertEquals(1024, ModelConfig.limitMax("layers"));
        assertEquals(0, ModelConfig.limitMin("vocabSize"));
        // the limits are the ones the builder enforces
        Mamba1Config.builder().layers((int) ModelConfig.limitMax("layers")).dModel(1).build();
        assertThrowsConfig(() -> Mamba1Config.builder().layers((int) ModelConfig.limitMax("layers") + 1).build());
        assertThrowsConfig(() -> Mamba1Config.builder().dState((int) ModelConfig.limitMax("dState") + 1).build());
    }

    private static void assertThrowsConfig(Runnable r) {
        org.junit.jupiter.api.Assertions.assertThrows(InvalidConfigException.class, r::run);
    }

    /** The builder's layout (no model allocated) is the one the built model has: libmamba's ParamLayout. */
    @Test
    void parameterShapesWithoutAModelMatchTheModel() {
        Mamba1Config c = Mamba1Config.builder().dModel(24).dState(8).dConv(3).layers(2).dtRank(5).build();
        for (MambaModel.Builder b : List.of(MambaModel.builder(c).inputDim(7), MambaModel.builder(c).vocabSize(40),
                MambaModel.builder(c).vocabSize(40).tieEmbeddings(false))) {
            Map<String, long[]> shapes = b.parameterShapes();
            try (MambaModel m = b.build()) {
                assertEquals(m.parameterNames(), List.copyOf(shapes.keySet()));
                for (String name : m.parameterNames()) assertArrayEquals(m.parameterShape(name), shapes.get(name), name);
            }
        }
        Map<String, long[]> untied = MambaModel.builder(c).vocabSize(40).tieEmbeddings(false).parameterShapes();
        assertArrayEquals(new long[] {40, 24}, untied.get("lm_head.weight"));
        assertArrayEquals(new long[] {5 + 2 * 8, 48}, untied.get("backbone.layers.1.mixer.x_proj.weight"));
    }
}
