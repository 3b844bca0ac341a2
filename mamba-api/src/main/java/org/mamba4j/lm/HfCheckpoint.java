package org.mamba4j.lm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Files;
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
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.io.SafeTensorsFile;
import org.mamba4j.io.StoredDType;
import org.mamba4j.io.TensorInfo;

/**
 * Reads a HuggingFace {@code MambaForCausalLM} folder (state-spaces/mamba-*-hf or save_pretrained output):
 * config.json plus model.safetensors or a sharded model.safetensors.index.json. Every tensor's name,
 * shape and dtype is checked before the first weight is copied; the vocabulary is zero-padded up to
 * the padded size; a tied head ignores any stored lm_head.weight.
 */
final class HfCheckpoint implements AutoCloseable {
    private static final long MAX_INDEX_BYTES = 64L << 20;
    private final Path dir;
    final HfMambaConfig config;
    private final List<SafeTensorsFile> shards = new ArrayList<>();
    private final Map<String, SafeTensorsFile> byName = new LinkedHashMap<>();

    private HfCheckpoint(Path dir) {
        this.dir = dir;
        if (!Files.isDirectory(dir)) throw new CheckpointException("not a model folder: " + dir);
        this.config = HfMambaConfig.read(dir.resolve("config.json"));
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
            JsonNode root = new ObjectMapper().readTree(index.toFile());
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
            Path p = dir.resolve(file).normalize();
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

    /** The mamba4j parameter name a checkpoint key maps to (embedding spelled either way), or empty. */
    private static String ourName(String key) {
        return key.equals("backbone.embedding.weight") ? "backbone.embeddings.weight" : key;
    }

    /** Builds the model, validates every tensor, then copies them in; the model is closed on any failure. */
    MambaModel load(Device device, DType dtype, LoadListener listener) {
        HfMambaConfig c = config;
        Mamba1Config mc = Mamba1Config.builder().dModel(c.dModel()).dState(c.dState()).dConv(c.dConv()).expand(c.expand())
                .dtRank(c.dtRank()).layers(c.nLayers()).normEps(c.normEps()).build();
        Map<String, String> plan = plan(mc);
        long total = 0;
        for (String key : plan.values()) total += byName.get(key) == null ? 0 : byName.get(key).get(key).byteSize();
        MambaModel model = MambaModel.builder(mc).vocabSize(c.paddedVocab()).tieEmbeddings(c.tieEmbeddings())
                .device(device).dtype(dtype).build();
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

    /** For each mamba4j parameter, the checkpoint key to read (null = zeros), after checking every shape and dtype. */
    private Map<String, String> plan(Mamba1Config mc) {
        HfMambaConfig c = config;
        int V = c.paddedVocab(), D = c.dModel(), E = mc.dInner(), N = mc.dState(), R = mc.dtRank(), K = mc.dConv();
        Map<String, long[]> want = new LinkedHashMap<>();
        want.put("backbone.embeddings.weight", new long[] {V, D});
        for (int i = 0; i < c.nLayers(); i++) {
            String p = "backbone.layers." + i + ".";
            want.put(p + "norm.weight", new long[] {D});
            want.put(p + "mixer.in_proj.weight", new long[] {2L * E, D});
            want.put(p + "mixer.conv1d.weight", new long[] {E, 1, K});
            want.put(p + "mixer.conv1d.bias", new long[] {E});
            want.put(p + "mixer.x_proj.weight", new long[] {R + 2L * N, E});
            want.put(p + "mixer.dt_proj.weight", new long[] {E, R});
            want.put(p + "mixer.dt_proj.bias", new long[] {E});
            want.put(p + "mixer.A_log", new long[] {E, N});
            want.put(p + "mixer.D", new long[] {E});
            want.put(p + "mixer.out_proj.weight", new long[] {D, E});
        }
        want.put("backbone.norm_f.weight", new long[] {D});
        if (!c.tieEmbeddings()) want.put("lm_head.weight", new long[] {V, D});

        Map<String, String> plan = new LinkedHashMap<>();
        for (String key : byName.keySet()) {
            String ours = ourName(key);
            if (ours.equals("lm_head.weight") && c.tieEmbeddings()) continue;  // tied: the embedding is the head
            if (!want.containsKey(ours)) throw new CheckpointException(dir + ": unexpected tensor '" + key + "'");
            if (plan.put(ours, key) != null) throw new CheckpointException(dir + ": tensor '" + ours + "' is stored twice");
        }
        for (Map.Entry<String, long[]> w : want.entrySet()) {
            String ours = w.getKey();
            String key = plan.get(ours);
            if (key == null) {
                if (ours.endsWith("conv1d.bias") && !c.useConvBias()) {
                    plan.put(ours, null);
                    continue;
                }
                throw new CheckpointException(dir + ": missing tensor '" + ours + "'");
            }
            TensorInfo t = byName.get(key).get(key);
            if (t.dtype() != StoredDType.F32 && t.dtype() != StoredDType.F16 && t.dtype() != StoredDType.BF16)
                throw new CheckpointException(dir + ": tensor '" + key + "' has dtype " + t.dtype() + "; F32, F16 or BF16 expected");
            long[] shape = t.shape(), expected = w.getValue();
            boolean vocabRows = ours.equals("backbone.embeddings.weight") || ours.equals("lm_head.weight");
            boolean ok = vocabRows
                    ? shape.length == 2 && shape[1] == D && shape[0] >= c.vocabSize() && shape[0] <= V
                    : Arrays.equals(shape, expected);
            if (!ok)
                throw new CheckpointException(dir + ": tensor '" + key + "' has shape " + Arrays.toString(shape) + ", expected "
                        + (vocabRows ? "[" + c.vocabSize() + ".." + V + ", " + D + "]" : Arrays.toString(expected)));
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
