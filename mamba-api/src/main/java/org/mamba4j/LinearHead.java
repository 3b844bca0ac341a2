package org.mamba4j;

import java.nio.file.Path;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import org.mamba4j.io.SafeTensors;
import org.mamba4j.io.SafeTensorsFile;
import org.mamba4j.io.TensorInfo;

/**
 * A linear output head, {@code logits = W·h + b} with W [vocab, dModel] and b [vocab]: the weights a
 * {@link Trainer} learns for softmax cross-entropy, as plain Java arrays. Use it to turn a model's
 * outputs into predictions, and to save the head next to its model (tensors {@code lm_head.weight} and
 * {@code lm_head.bias} in a safetensors file). Immutable: the arrays are copied in and out.
 */
public final class LinearHead {
    static final String WEIGHT = "lm_head.weight";
    static final String BIAS = "lm_head.bias";
    private static final String FORMAT = "mamba4j-head", VERSION = "2";

    private final int vocab, dModel;
    private final float[] weight, bias;

    /** A head from its weight [vocab · dModel] (row-major) and bias [vocab]. */
    public LinearHead(int vocab, int dModel, float[] weight, float[] bias) {
        Checks.positive("vocab", vocab);
        Checks.positive("dModel", dModel);
        Checks.length("weight", Objects.requireNonNull(weight, "weight").length, (long) vocab * dModel);
        Checks.length("bias", Objects.requireNonNull(bias, "bias").length, vocab);
        Checks.finite("weight", weight);
        Checks.finite("bias", bias);
        this.vocab = vocab;
        this.dModel = dModel;
        this.weight = weight.clone();
        this.bias = bias.clone();
    }

    public int vocab() { return vocab; }
    public int dModel() { return dModel; }
    /** A copy of W, [vocab · dModel] row-major. */
    public float[] weight() { return weight.clone(); }
    /** A copy of b. */
    public float[] bias() { return bias.clone(); }

    /** Logits [rows · vocab] for hidden states [rows · dModel]. */
    public float[] logits(float[] hidden) {
        int rows = rows(hidden);
        float[] out = new float[rows * vocab];
        for (int r = 0; r < rows; r++)
            for (int k = 0; k < vocab; k++) {
                float s = bias[k];
                for (int j = 0; j < dModel; j++) s += weight[k * dModel + j] * hidden[r * dModel + j];
                out[r * vocab + k] = s;
            }
        return out;
    }

    /** The most likely class of each row of hidden states [rows · dModel]. */
    public int[] argmax(float[] hidden) {
        int rows = rows(hidden);
        float[] logits = logits(hidden);
        int[] out = new int[rows];
        for (int r = 0; r < rows; r++) {
            int best = 0;
            for (int k = 1; k < vocab; k++)
                if (logits[r * vocab + k] > logits[r * vocab + best]) best = k;
            out[r] = best;
        }
        return out;
    }

    /**
     * Writes {@code lm_head.weight} [vocab, dModel] and {@code lm_head.bias} [vocab] to a safetensors file
     * (atomically), with a CRC-32C of the content in the metadata (format version 2).
     */
    public void save(Path file) {
        Map<String, String> meta = new LinkedHashMap<>();
        meta.put("format", FORMAT);
        meta.put("format_version", VERSION);
        long[] ws = {vocab, dModel}, bs = {vocab};
        meta.put(CheckpointChecksum.KEY, CheckpointChecksum.of(meta, Map.of(WEIGHT, ws, BIAS, bs), Map.of(WEIGHT, weight, BIAS, bias)));
        SafeTensors.write(file, meta, List.of(new SafeTensors.Entry(WEIGHT, ws, weight), new SafeTensors.Entry(BIAS, bs, bias)));
    }

    /**
     * Reads {@code lm_head.weight} and {@code lm_head.bias} from a safetensors file. Other tensors are ignored,
     * except in a file written by {@link #save} (format {@code mamba4j-head}), which must hold exactly these
     * two and match its checksum.
     */
    public static LinearHead load(Path file) {
        try (SafeTensorsFile f = SafeTensorsFile.open(file)) {
            boolean ours = FORMAT.equals(f.metadata().get("format"));
            String version = f.metadata().get("format_version");
            if (ours && !VERSION.equals(version) && !"1".equals(version))
                throw new CheckpointException(file + ": unsupported format_version " + version);
            TensorInfo w = f.find(WEIGHT).orElseThrow(() -> new CheckpointException(file + ": missing tensor '" + WEIGHT + "'"));
            TensorInfo b = f.find(BIAS).orElseThrow(() -> new CheckpointException(file + ": missing tensor '" + BIAS + "'"));
            long[] ws = w.shape(), bs = b.shape();
            if (ws.length != 2 || bs.length != 1 || bs[0] != ws[0] || ws[0] < 1 || ws[1] < 1 || ws[0] * ws[1] > Integer.MAX_VALUE - 8)
                throw new CheckpointException(file + ": head shapes " + Arrays.toString(ws) + " and " + Arrays.toString(bs)
                        + " are not [vocab, dModel] and [vocab]");
            try {
                float[] weight = f.readFloats(WEIGHT), bias = f.readFloats(BIAS);
                if (ours) {
                    if (f.tensors().size() != 2) throw new CheckpointException(file + ": a head file holds " + f.tensors().size() + " tensors, expected 2");
                    CheckpointChecksum.verify(f, Map.of(WEIGHT, weight, BIAS, bias), VERSION.equals(version));
                }
                return new LinearHead((int) ws[0], (int) ws[1], weight, bias);
            } catch (IllegalArgumentException e) {
                throw new CheckpointException(file + ": bad head: " + e.getMessage(), e);
            }
        }
    }

    private int rows(float[] hidden) {
        Objects.requireNonNull(hidden, "hidden");
        if (hidden.length % dModel != 0)
            throw new IllegalArgumentException("hidden has " + hidden.length + " floats, not a multiple of dModel = " + dModel);
        return hidden.length / dModel;
    }

    @Override
    public String toString() {
        return "LinearHead{vocab=" + vocab + ", dModel=" + dModel + "}";
    }
}
