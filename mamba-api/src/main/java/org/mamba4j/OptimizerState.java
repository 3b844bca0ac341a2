package org.mamba4j;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import org.mamba4j.io.SafeTensors;
import org.mamba4j.io.SafeTensorsFile;
import org.mamba4j.io.TensorInfo;

/**
 * A snapshot of AdamW's state: the step count and, per trainable tensor, the first and second moments
 * (PyTorch's {@code exp_avg} and {@code exp_avg_sq}). Exported by {@link Trainer#exportOptimizerState()}
 * and imported by {@link Trainer#importOptimizerState}: with the same weights, head, learning rate and data,
 * a resumed run is bit-identical to an uninterrupted one. Saved as safetensors with tensors
 * {@code exp_avg.<name>} / {@code exp_avg_sq.<name>} and the step count in the metadata, with a CRC-32C of
 * the whole content (format version 2; version 1 files, without it, still load). Immutable: arrays are copied
 * in and out.
 */
public final class OptimizerState {
    private static final String FORMAT = "mamba4j-adamw";
    private static final String VERSION = "2", VERSION_1 = "1";
    private final long step;
    private final Map<String, float[]> m, v;

    /** A state from a step count and per-tensor moments (same names in both maps). */
    public OptimizerState(long step, Map<String, float[]> m, Map<String, float[]> v) {
        if (step < 0) throw new IllegalArgumentException("step = " + step + " must be >= 0");
        Objects.requireNonNull(m, "m");
        Objects.requireNonNull(v, "v");
        if (!m.keySet().equals(v.keySet())) throw new IllegalArgumentException("m and v name different tensors");
        this.step = step;
        this.m = copy(m);
        this.v = copy(v);
        for (String name : this.m.keySet())
            Checks.length("v of " + name, this.v.get(name).length, this.m.get(name).length);
    }

    /** Optimizer steps taken. */
    public long step() { return step; }

    /** Tensor names, in the trainer's order. */
    public List<String> names() { return Collections.unmodifiableList(new ArrayList<>(m.keySet())); }

    /** A copy of the first moment of a tensor. */
    public float[] firstMoment(String name) { return get(m, name); }

    /** A copy of the second moment of a tensor. */
    public float[] secondMoment(String name) { return get(v, name); }

    /** Writes the state to a safetensors file (atomically). */
    public void save(Path file) {
        Map<String, String> meta = new LinkedHashMap<>();
        meta.put("format", FORMAT);
        meta.put("format_version", VERSION);
        meta.put("step", Long.toString(step));
        Map<String, long[]> shapes = new LinkedHashMap<>();
        Map<String, float[]> data = new LinkedHashMap<>();
        for (String name : m.keySet()) {
            long[] n = {m.get(name).length};
            shapes.put("exp_avg." + name, n);
            data.put("exp_avg." + name, m.get(name));
            shapes.put("exp_avg_sq." + name, n);
            data.put("exp_avg_sq." + name, v.get(name));
        }
        meta.put(CheckpointChecksum.KEY, CheckpointChecksum.of(meta, shapes, data));
        List<SafeTensors.Entry> entries = new ArrayList<>();
        for (String name : shapes.keySet()) entries.add(new SafeTensors.Entry(name, shapes.get(name), data.get(name)));
        SafeTensors.write(file, meta, entries);
    }

    /** Reads a state written by {@link #save}. */
    public static OptimizerState load(Path file) {
        try (SafeTensorsFile f = SafeTensorsFile.open(file)) {
            Map<String, String> meta = f.metadata();
            if (!FORMAT.equals(meta.get("format")))
                throw new CheckpointException(file + " is not a mamba4j optimizer state (format = " + meta.get("format") + ")");
            String version = meta.get("format_version");
            if (!VERSION.equals(version) && !VERSION_1.equals(version))
                throw new CheckpointException(file + ": unsupported format_version " + version);
            long step;
            try {
                step = Long.parseLong(meta.getOrDefault("step", "x"));
            } catch (NumberFormatException e) {
                throw new CheckpointException(file + ": bad step count '" + meta.get("step") + "'", e);
            }
            Map<String, float[]> m = new LinkedHashMap<>(), v = new LinkedHashMap<>(), all = new LinkedHashMap<>();
            for (TensorInfo t : f.tensors()) {
                if (!t.name().startsWith("exp_avg_sq.") && !t.name().startsWith("exp_avg."))
                    throw new CheckpointException(file + ": unexpected tensor '" + t.name() + "'");
                if (t.shape().length != 1)
                    throw new CheckpointException(file + ": tensor '" + t.name() + "' has shape " + java.util.Arrays.toString(t.shape())
                            + ", expected one dimension");
                float[] values = f.readFloats(t.name());
                all.put(t.name(), values);
                if (t.name().startsWith("exp_avg_sq.")) v.put(t.name().substring(11), values);
                else m.put(t.name().substring(8), values);
            }
            CheckpointChecksum.verify(f, all, VERSION.equals(version));
            // moments that would turn AdamW's update into NaN: non-finite values, negative second moments
            for (Map.Entry<String, float[]> e : all.entrySet()) {
                boolean second = e.getKey().startsWith("exp_avg_sq.");
                float[] a = e.getValue();
                for (int i = 0; i < a.length; i++)
                    if (!Float.isFinite(a[i]) || (second && a[i] < 0))
                        throw new CheckpointException(file + ": tensor '" + e.getKey() + "' holds " + a[i] + " at " + i);
            }
            try {
                return new OptimizerState(step, m, v);
            } catch (IllegalArgumentException e) {
                throw new CheckpointException(file + ": " + e.getMessage(), e);
            }
        }
    }

    private static Map<String, float[]> copy(Map<String, float[]> src) {
        Map<String, float[]> out = new LinkedHashMap<>();
        for (Map.Entry<String, float[]> e : src.entrySet())
            out.put(Objects.requireNonNull(e.getKey(), "name"), Objects.requireNonNull(e.getValue(), e.getKey()).clone());
        return out;
    }

    private static float[] get(Map<String, float[]> map, String name) {
        float[] a = map.get(name);
        if (a == null) throw new IllegalArgumentException("no tensor named '" + name + "' in this optimizer state");
        return a.clone();
    }

    @Override
    public String toString() {
        return "OptimizerState{step=" + step + ", tensors=" + m.size() + "}";
    }
}
