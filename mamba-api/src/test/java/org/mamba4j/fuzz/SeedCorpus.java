package org.mamba4j.fuzz;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.mamba4j.AdamW;
import org.mamba4j.LinearHead;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.Trainer;
import org.mamba4j.io.SafeTensors;

/**
 * Writes the hand-made seed files of mamba-api's fuzz targets under {@code src/test/resources} (run once from the
 * module folder: {@code java -cp <test class path> org.mamba4j.fuzz.SeedCorpus}; mamba-lm's are written by
 * {@code org.mamba4j.lm.LmSeedCorpus}, which uses {@link #quote} and {@link #text}). Seeds are small valid files of
 * each format plus a few hostile ones; crash inputs found by fuzzing are added next to them by hand and never
 * regenerated. The files are checked in; this class documents where they came from.
 */
public final class SeedCorpus {
    private static final Path RESOURCES = Path.of("src/test/resources/org/mamba4j");

    private SeedCorpus() {}

    public static void main(String[] args) throws IOException {
        Path tmp = Files.createTempDirectory("seeds");
        safetensors(tmp);
        checkpoints(tmp);
        System.out.println("seeds written under " + RESOURCES.toAbsolutePath());
    }

    private static Mamba1Config tiny() {
        return Mamba1Config.builder().dModel(2).dState(1).dConv(2).expand(1).dtRank(1).layers(1).build();
    }

    private static void safetensors(Path tmp) throws IOException {
        Path dir = RESOURCES.resolve("io/SafeTensorsFuzzTestInputs");
        Map<String, String> meta = new LinkedHashMap<>();
        meta.put("format", "pt");
        SafeTensors.write(dir.resolve("f32-matrix-and-scalar"), meta, List.of(
                new SafeTensors.Entry("w", new long[] {2, 3}, new float[] {1, 2, 3, 4, 5, 6}),
                new SafeTensors.Entry("s", new long[0], new float[] {0.5f}),
                new SafeTensors.Entry("empty", new long[] {0, 4}, new float[0])));
        // other dtypes, written by hand: [header length][header][data]
        raw(dir.resolve("bf16-f16-f64-i32"), "{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
                + "\"b\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[4,8]},"
                + "\"c\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[8,16]},"
                + "\"d\":{\"dtype\":\"I32\",\"shape\":[1,1],\"data_offsets\":[16,20]},\"__metadata__\":{\"k\":\"v\"}}", 20);
        raw(dir.resolve("huge-shape-claim"), "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8);
        raw(dir.resolve("offsets-beyond-file"), "{\"w\":{\"dtype\":\"F32\",\"shape\":[1073741824],\"data_offsets\":[0,4294967296]}}", 8);
        raw(dir.resolve("overlap"), "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                + "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12);
        byte[] hugeHeader = new byte[16];
        ByteBuffer.wrap(hugeHeader).order(ByteOrder.LITTLE_ENDIAN).putLong(Long.MAX_VALUE);
        Files.write(dir.resolve("header-length-claims-8-EiB"), hugeHeader);
        try (MambaModel m = MambaModel.builder(tiny()).inputDim(1).seed(1).build()) {
            m.save(dir.resolve("mamba4j-checkpoint"));
        }
    }

    private static void checkpoints(Path tmp) throws IOException {
        Path models = RESOURCES.resolve("CheckpointFuzzTestInputs");
        try (MambaModel m = MambaModel.builder(tiny()).inputDim(1).seed(1).build()) {
            m.save(models.resolve("tiny-backbone"));
            try (Trainer t = Trainer.builder(m).adamW(AdamW.ofLearningRate(1e-2)).crossEntropyHead(3).build()) {
                t.stepCrossEntropy(new float[] {0.5f}, new int[] {1});
                t.snapshot().save(models.resolve("trainer-snapshot"));
                t.exportOptimizerState().save(RESOURCES.resolve("OptimizerStateFuzzTestInputs/after-one-step"));
                t.head().save(RESOURCES.resolve("LinearHeadFuzzTestInputs/trained-head"));
            }
        }
        try (MambaModel lm = MambaModel.builder(tiny()).vocabSize(3).tieEmbeddings(false).seed(2).build()) {
            lm.save(models.resolve("tiny-language-model"));
        }
        // a small file claiming the largest configuration: must fail before any model is built
        String bigConfig = "{\"d_model\":65536,\"d_state\":256,\"d_conv\":8,\"expand\":1,\"dt_rank\":0,\"n_layers\":1024,"
                + "\"norm_eps\":1e-5,\"dt_min\":0.001,\"dt_max\":0.1,\"dt_init_floor\":1e-4}";
        raw(models.resolve("claims-a-huge-model"), "{\"__metadata__\":{\"format\":\"mamba4j\",\"format_version\":\"1\","
                + "\"arch\":\"mamba1\",\"input_dim\":\"0\",\"vocab_size\":\"0\",\"tie_embeddings\":\"true\",\"config\":"
                + quote(bigConfig) + "}}", 0);
        new LinearHead(2, 2, new float[] {1, 2, 3, 4}, new float[] {0, 1}).save(RESOURCES.resolve("LinearHeadFuzzTestInputs/small-head"));
    }

    /** {@code s} as a JSON string literal. */
    public static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    /** Writes {@code s} as UTF-8, creating the folders. */
    public static void text(Path f, String s) throws IOException {
        Files.createDirectories(f.getParent());
        Files.writeString(f, s, StandardCharsets.UTF_8);
    }

    /** A safetensors file from a header and {@code dataBytes} bytes of data (1, 2, 3, …). */
    private static void raw(Path f, String header, int dataBytes) throws IOException {
        byte[] h = header.getBytes(StandardCharsets.UTF_8);
        ByteBuffer b = ByteBuffer.allocate(8 + h.length + dataBytes).order(ByteOrder.LITTLE_ENDIAN);
        b.putLong(h.length).put(h);
        for (int i = 0; i < dataBytes; i++) b.put((byte) (i + 1));
        Files.createDirectories(f.getParent());
        Files.write(f, b.array());
    }
}
