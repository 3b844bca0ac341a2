package org.mamba4j;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.mamba4j.io.SafeTensors;
import org.mamba4j.io.SafeTensorsFile;
import org.mamba4j.io.StoredDType;
import org.mamba4j.io.TensorInfo;

/**
 * mamba4j checkpoints: safetensors files whose tensors carry HuggingFace names and PyTorch shapes
 * (so Python tools read them as-is) and whose {@code __metadata__} holds the format, architecture and
 * configuration. Version 2 adds a {@link CheckpointChecksum} (required); version 1 files still load.
 *
 * <p>A file's tensors are checked against the shapes its configuration implies before any model is built,
 * so a small file that claims a huge configuration fails without allocating that model.
 */
final class Checkpoints {
    static final String FORMAT = "mamba4j";
    static final String FORMAT_VERSION = "2";
    /** The first version, without a checksum: still read. */
    static final String FORMAT_VERSION_1 = "1";
    private static final ObjectMapper JSON = new ObjectMapper();

    private Checkpoints() {}

    static void save(MambaModel model, Path file) {
        Map<String, String> meta = new LinkedHashMap<>();
        meta.put("format", FORMAT);
        meta.put("format_version", FORMAT_VERSION);
        meta.put("arch", model.config().arch());
        meta.put("input_dim", Integer.toString(model.inputDim()));
        meta.put("vocab_size", Integer.toString(model.vocabSize()));
        meta.put("tie_embeddings", Boolean.toString(model.tieEmbeddings()));
        try {
            meta.put("config", JSON.writeValueAsString(ModelConfigs.toMetadata(model.config())));
        } catch (Exception e) {
            throw new CheckpointException("could not encode the configuration", e);
        }
        Map<String, long[]> shapes = new LinkedHashMap<>();
        Map<String, float[]> values = new LinkedHashMap<>();
        for (String name : model.parameterNames()) {
            shapes.put(name, model.parameterShape(name));
            values.put(name, model.getParameter(name));
        }
        meta.put(CheckpointChecksum.KEY, CheckpointChecksum.of(meta, shapes, values));
        List<SafeTensors.Entry> entries = new ArrayList<>();
        for (String name : shapes.keySet()) entries.add(new SafeTensors.Entry(name, shapes.get(name), values.get(name)));
        SafeTensors.write(file, meta, entries);
    }

    static MambaModel load(Path file, Device device, DType dtype) {
        try (SafeTensorsFile f = SafeTensorsFile.open(file)) {
            Header h = header(f);
            MambaModel.Builder builder = MambaModel.builder(h.config).inputDim(h.inputDim).vocabSize(h.vocabSize)
                    .tieEmbeddings(h.tie).device(device).dtype(dtype);
            Map<String, float[]> values = readAll(f, h, shapesOf(builder, f, h.config));
            MambaModel model = builder.build();
            try {
                copyWeights(model, values);
                return model;
            } catch (RuntimeException e) {
                model.close();
                throw e;
            }
        }
    }

    static void loadInto(MambaModel model, Path file) {
        try (SafeTensorsFile f = SafeTensorsFile.open(file)) {
            Header h = header(f);
            if (!h.config.equals(model.config()) || h.inputDim != model.inputDim() || h.vocabSize != model.vocabSize()
                    || h.tie != model.tieEmbeddings())
                throw new CheckpointException(file + " holds a model of another shape: " + h.config + ", inputDim="
                        + h.inputDim + "; this model is " + model.config() + ", inputDim=" + model.inputDim());
            Map<String, long[]> shapes = new LinkedHashMap<>();
            for (String name : model.parameterNames()) shapes.put(name, model.parameterShape(name));
            copyWeights(model, readAll(f, h, shapes));
        }
    }

    /** The parameters a model of the file's settings has, without building it; settings out of range are the file's fault. */
    private static Map<String, long[]> shapesOf(MambaModel.Builder builder, SafeTensorsFile f, ModelConfig config) {
        // every block has tensors: a file with fewer tensors than blocks cannot be complete, and listing the
        // parameters of a claimed 1024 blocks would cost megabytes for a file of a few hundred bytes
        if (config.layers() > f.tensors().size())
            throw new CheckpointException(f.path() + ": the configuration has " + config.layers() + " blocks but the file holds only "
                    + f.tensors().size() + " tensors");
        try {
            return builder.parameterShapes();
        } catch (InvalidConfigException e) {
            throw new CheckpointException(f.path() + ": bad configuration in metadata: " + e.getMessage(), e);
        }
    }

    private record Header(ModelConfig config, int inputDim, int vocabSize, boolean tie, boolean checksummed) {}

    private static Header header(SafeTensorsFile f) {
        Map<String, String> meta = f.metadata();
        String where = f.path().toString();
        if (!FORMAT.equals(meta.get("format")))
            throw new CheckpointException(where + " is not a mamba4j checkpoint (metadata format = " + meta.get("format")
                    + "); HuggingFace folders load through MambaLM.fromPretrained (org.mamba4j:mamba-lm)");
        String version = meta.get("format_version");
        if (!FORMAT_VERSION.equals(version) && !FORMAT_VERSION_1.equals(version))
            throw new CheckpointException(where + ": unsupported format_version " + version);
        try {
            JsonNode c = JSON.readTree(meta.getOrDefault("config", ""));
            if (c == null || !c.isObject()) throw new CheckpointException(where + ": metadata 'config' is not a JSON object");
            ModelConfig config = ModelConfigs.fromMetadata(meta.get("arch"), c, where);
            int inputDim = Integer.parseInt(meta.getOrDefault("input_dim", "x"));
            if (inputDim < 0) throw new CheckpointException(where + ": input_dim = " + inputDim + " is negative");
            int vocab = Integer.parseInt(meta.getOrDefault("vocab_size", "0"));
            if (vocab < 0 || vocab > ModelConfig.limitMax("vocabSize")) throw new CheckpointException(where + ": vocab_size = " + vocab + " is out of range");
            String tie = meta.getOrDefault("tie_embeddings", "true");
            if (!tie.equals("true") && !tie.equals("false")) throw new CheckpointException(where + ": tie_embeddings = " + tie);
            return new Header(config, inputDim, vocab, Boolean.parseBoolean(tie), FORMAT_VERSION.equals(version));
        } catch (InvalidConfigException | NumberFormatException e) {
            throw new CheckpointException(where + ": bad configuration in metadata: " + e.getMessage(), e);
        } catch (CheckpointException e) {
            throw e;
        } catch (Exception e) {
            throw new CheckpointException(where + ": metadata 'config' is not valid JSON: " + e.getMessage(), e);
        }
    }

    /**
     * Checks names, shapes and dtypes of every tensor against {@code shapes} (the model's parameters, in order),
     * then reads them all and verifies the checksum; no model is touched. Every value read is a tensor of the
     * file, so what this allocates is bounded by the file's size (twice it for 2-byte tensors).
     */
    private static Map<String, float[]> readAll(SafeTensorsFile f, Header h, Map<String, long[]> shapes) {
        String where = f.path().toString();
        Set<String> expected = new HashSet<>(shapes.keySet());
        for (TensorInfo t : f.tensors())
            if (!expected.contains(t.name())) throw new CheckpointException(where + ": unexpected tensor '" + t.name() + "'");
        Map<String, float[]> values = new LinkedHashMap<>();
        for (String name : shapes.keySet()) {
            TensorInfo t = f.find(name).orElseThrow(() -> new CheckpointException(where + ": missing tensor '" + name + "'"));
            long[] want = shapes.get(name);
            if (!Arrays.equals(t.shape(), want))
                throw new CheckpointException(where + ": tensor '" + name + "' has shape " + Arrays.toString(t.shape())
                        + ", expected " + Arrays.toString(want));
            if (t.dtype() != StoredDType.F32 && t.dtype() != StoredDType.BF16 && t.dtype() != StoredDType.F16)
                throw new CheckpointException(where + ": tensor '" + name + "' has dtype " + t.dtype() + ", expected F32, BF16 or F16");
        }
        for (String name : shapes.keySet()) values.put(name, f.readFloats(name));
        CheckpointChecksum.verify(f, values, h.checksummed);  // before the finiteness check: corruption is the better diagnosis
        for (Map.Entry<String, float[]> e : values.entrySet()) {
            float[] v = e.getValue();
            for (int i = 0; i < v.length; i++)
                if (!Float.isFinite(v[i]))
                    throw new CheckpointException(where + ": tensor '" + e.getKey() + "' holds a non-finite value at " + i);
        }
        return values;
    }

    private static void copyWeights(MambaModel model, Map<String, float[]> values) {
        for (Map.Entry<String, float[]> e : values.entrySet()) model.setParameter(e.getKey(), e.getValue());
    }
}
