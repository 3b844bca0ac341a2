package org.mamba4j.lm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.InvalidPathException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.mamba4j.CheckpointException;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.InvalidConfigException;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.ModelConfig;
import org.mamba4j.io.SafeTensorsFile;
import org.mamba4j.io.StoredDType;
import org.mamba4j.io.TensorInfo;

/**
 * Reads a language-model folder: config.json plus model.safetensors or a sharded model.safetensors.index.json.
 * Two kinds of folder, told apart by config.json: a Mamba-1 model in the HuggingFace {@code MambaForCausalLM} or
 * state-spaces layout ({@link HfMambaConfig}), or a Mamba-3 SISO model in the official state-spaces layout
 * ({@code ssm_cfg.layer = "Mamba3"}, {@link Mamba3LMConfig}). Every tensor's name, shape and dtype is checked
 * before the model is allocated; the vocabulary is zero-padded up to the padded size; a tied head ignores any
 * stored lm_head.weight.
 */
final class HfCheckpoint implements AutoCloseable {
    private static final long MAX_INDEX_BYTES = 64L << 20;
    /** One mapper for every load: a new ObjectMapper costs ~1 MB of allocation, more than a small index. */
    private static final ObjectMapper INDEX_JSON = new ObjectMapper();
    private final Path dir;
    /** The Mamba-1 description, or null for a Mamba-3 folder. */
    final HfMambaConfig config;
    /** The Mamba-3 description, or null for a Mamba-1 folder. */
    final Mamba3LMConfig mamba3;
    /** The architecture of the blocks. */
    final ModelConfig modelConfig;
    /** The real vocabulary (config.json's vocab_size). */
    final int vocabSize;
    private final int paddedVocab;
    private final boolean tie;
    /** Whether conv1d.bias may be absent (Mamba-1 with use_conv_bias false): then it is zeros. */
    private final boolean convBiasOptional;
    private final List<SafeTensorsFile> shards = new ArrayList<>();
    private final Map<String, SafeTensorsFile> byName = new LinkedHashMap<>();

    private HfCheckpoint(Path dir) {
        this.dir = dir;
        if (!Files.isDirectory(dir)) throw new CheckpointException("not a model folder: " + dir);
        Path configFile = dir.resolve("config.json");
        if (Mamba3LMConfig.isMamba3(configFile)) {
            Mamba3LMConfig m3 = Mamba3LMConfig.read(configFile);
            this.config = null;
            this.mamba3 = m3;
            this.modelConfig = m3.config();
            this.vocabSize = m3.vocabSize();
            this.paddedVocab = m3.paddedVocab();
            this.tie = m3.tieEmbeddings();
            this.convBiasOptional = false;
        } else {
            HfMambaConfig c = HfMambaConfig.read(configFile);
            this.config = c;
            this.mamba3 = null;
            try {
                this.modelConfig = Mamba1Config.builder().dModel(c.dModel()).dState(c.dState()).dConv(c.dConv()).expand(c.expand())
                        .dtRank(c.dtRank()).layers(c.nLayers()).normEps(c.normEps()).build();
            } catch (InvalidConfigException e) {  // a combination beyond libmamba's limits, e.g. expand × d_model
                throw new CheckpointException(configFile + ": " + e.getMessage(), e);
            }
            this.vocabSize = c.vocabSize();
            this.paddedVocab = c.paddedVocab();
            this.tie = c.tieEmbeddings();
            this.convBiasOptional = !c.useConvBias();
        }
        try {
            Path single = dir.resolve("model.safetensors"), index = dir.resolve("model.safetensors.index.json");
            if (Files.isRegularFile(single)) {
                add(SafeTensorsFile.open(single));
            } else if (Files.isRegularFile(index)) {
                openShards(index);
            } else {
                throw new CheckpointException(dir + " holds neither model.safetensors nor model.safetensors.index.json"
                        + " (PyTorch .bin checkpoints are not supported: convert them with save_pretrained(safe_serialization=True))");
            }
        } catch (RuntimeException e) {
            close();
            throw e;
        }
    }

    static HfCheckpoint open(Path dir) {
        return new HfCheckpoint(dir);
    }

    private void openShards(Path index) {
        JsonNode map;
        try {
            if (Files.size(index) > MAX_INDEX_BYTES) throw new CheckpointException(index + " is larger than 64 MiB");
            JsonNode root = INDEX_JSON.readTree(index.toFile());
            map = root == null ? null : root.get("weight_map");
        } catch (IOException e) {
            throw new CheckpointException(index + " is not valid JSON: " + e.getMessage(), e);
        }
        if (map == null || !map.isObject() || map.isEmpty())
            throw new CheckpointException(index + " has no weight_map object");
        Map<String, SafeTensorsFile> files = new LinkedHashMap<>();
        for (Iterator<Map.Entry<String, JsonNode>> it = map.fields(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> e = it.next();
            if (!e.getValue().isTextual()) throw new CheckpointException(index + ": weight_map['" + e.getKey() + "'] is not a file name");
            String file = e.getValue().asText();
            Path p;
            try {
                p = dir.resolve(file).normalize();
            } catch (InvalidPathException bad) {  // e.g. a NUL character in the name
                throw new CheckpointException(index + ": shard '" + file + "' is not a valid file name", bad);
            }
            // A shard must be a plain file inside the folder: no "../" escapes, no absolute paths.
            if (!p.getParent().equals(dir.normalize()) || !file.endsWith(".safetensors"))
                throw new CheckpointException(index + ": shard '" + file + "' is not a .safetensors file in " + dir);
            SafeTensorsFile f = files.get(file);
            if (f == null) {
                f = SafeTensorsFile.open(p);
                files.put(file, f);
                shards.add(f);
            }
            if (f.find(e.getKey()).isEmpty())
                throw new CheckpointException(index + " maps '" + e.getKey() + "' to " + file + ", which does not hold it");
        }
        for (SafeTensorsFile f : shards) for (TensorInfo t : f.tensors()) {
            if (byName.putIfAbsent(t.name(), f) != null)
                throw new CheckpointException(dir + ": tensor '" + t.name() + "' appears in two shards");
        }
    }

    private void add(SafeTensorsFile f) {
        shards.add(f);
        for (TensorInfo t : f.tensors()) byName.put(t.name(), f);
    }

    // HF spellings that differ from ours. These are facts about the file format; the names and shapes
    // themselves come from libmamba's layout (MambaModel.Builder.parameterShapes).
    private static final String EMBEDDING = "backbone.embeddings.weight";
    private static final String EMBEDDING_ALIAS = "backbone.embedding.weight";
    private static final String LM_HEAD = "lm_head.weight";
    private static final String CONV_BIAS_SUFFIX = "conv1d.bias";

    /** The mamba4j parameter name a checkpoint key maps to (the embedding is spelled either way). */
    private static String ourName(String key) {
        return key.equals(EMBEDDING_ALIAS) ? EMBEDDING : key;
    }

    /** Builds the model, validates every tensor, then copies them in; the model is closed on any failure. */
    MambaModel load(Device device, DType dtype, LoadListener listener) {
        MambaModel.Builder builder = MambaModel.builder(modelConfig).vocabSize(paddedVocab).tieEmbeddings(tie)
                .device(device).dtype(dtype);
        Map<String, long[]> want = builder.parameterShapes();
        Map<String, String> plan = plan(want);
        long total = 0, storedWeights = 0, needed = 0;
        for (String key : plan.values()) {
            if (key == null) continue;
            total += byName.get(key).get(key).byteSize();
            storedWeights += byName.get(key).get(key).elementCount();
        }
        for (long[] shape : want.values()) needed += product(shape);
        // Padding (vocabulary rows, an absent conv bias) adds a few zeros to a real checkpoint; a file that would
        // have the loader invent most of a model (vocab_size 1 padded to 65536 rows) allocates far beyond its size.
        if (needed > 2 * storedWeights)
            throw new CheckpointException(dir + ": the checkpoint holds " + storedWeights + " weights for a model of " + needed
                    + ": padding would have to invent more than half of them");
        MambaModel model = builder.build();
        try {
            long done = 0;
            for (Map.Entry<String, String> e : plan.entrySet()) {
                String ours = e.getKey(), key = e.getValue();
                long[] shape = model.parameterShape(ours);
                float[] values;
                if (key == null) {  // conv bias absent with use_conv_bias = false
                    values = new float[(int) shape[0]];
                } else {
                    SafeTensorsFile f = byName.get(key);
                    float[] stored = f.readFloats(key);
                    values = stored.length == product(shape) ? stored : Arrays.copyOf(stored, (int) product(shape));
                    for (int i = 0; i < stored.length; i++)
                        if (!Float.isFinite(stored[i]))
                            throw new CheckpointException(f.path() + ": tensor '" + key + "' holds a non-finite value at " + i);
                    done += f.get(key).byteSize();
                }
                model.setParameter(ours, values);
                listener.loaded(ours, done, total);
            }
            return model;
        } catch (RuntimeException e) {
            model.close();
            throw e;
        }
    }

    /**
     * For each parameter of the model ({@code want}: names and shapes in parameter order), the checkpoint key to
     * read (null = zeros), after checking every shape and dtype.
     */
    private Map<String, String> plan(Map<String, long[]> want) {
        Map<String, String> plan = new LinkedHashMap<>();
        for (String key : byName.keySet()) {
            String ours = ourName(key);
            if (ours.equals(LM_HEAD) && tie) continue;  // tied: the embedding is the head
            if (!want.containsKey(ours)) throw new CheckpointException(dir + ": unexpected tensor '" + key + "'");
            if (plan.put(ours, key) != null) throw new CheckpointException(dir + ": tensor '" + ours + "' is stored twice");
        }
        for (Map.Entry<String, long[]> w : want.entrySet()) {
            String ours = w.getKey();
            String key = plan.get(ours);
            if (key == null) {
                if (ours.endsWith(CONV_BIAS_SUFFIX) && convBiasOptional) {
                    plan.put(ours, null);
                    continue;
                }
                throw new CheckpointException(dir + ": missing tensor '" + ours + "'");
            }
            TensorInfo t = byName.get(key).get(key);
            if (t.dtype() != StoredDType.F32 && t.dtype() != StoredDType.F16 && t.dtype() != StoredDType.BF16)
                throw new CheckpointException(dir + ": tensor '" + key + "' has dtype " + t.dtype() + "; F32, F16 or BF16 expected");
            long[] shape = t.shape(), expected = w.getValue();
            // Vocabulary rows may be stored unpadded (vocab_size rows); we zero-pad them to the padded size.
            boolean vocabRows = ours.equals(EMBEDDING) || ours.equals(LM_HEAD);
            boolean ok = vocabRows
                    ? shape.length == 2 && shape[1] == expected[1] && shape[0] >= vocabSize && shape[0] <= expected[0]
                    : Arrays.equals(shape, expected);
            if (!ok)
                throw new CheckpointException(dir + ": tensor '" + key + "' has shape " + Arrays.toString(shape) + ", expected "
                        + (vocabRows ? "[" + vocabSize + ".." + expected[0] + ", " + expected[1] + "]" : Arrays.toString(expected)));
        }
        // Parameter order of the model, so loading streams in a predictable sequence.
        Map<String, String> ordered = new LinkedHashMap<>();
        for (String ours : want.keySet()) ordered.put(ours, plan.get(ours));
        return ordered;
    }

    private static long product(long[] shape) {
        long p = 1;
        for (long s : shape) p *= s;
        return p;
    }

    @Override
    public void close() {
        for (SafeTensorsFile f : shards) f.close();
    }
}
