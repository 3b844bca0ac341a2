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

    /** Writes {@code lm_head.weight} [vocab, dModel] and {@code lm_head.bias} [vocab] to a safetensors file (atomically). */
    public void save(Path file) {
        Map<String, String> meta = new LinkedHashMap<>();
        meta.put("format", "mamba4j-head");
        meta.put("format_version", "1");
        SafeTensors.write(file, meta, List.of(new SafeTensors.Entry(WEIGHT, new long[] {vocab, dModel}, weight),
                new SafeTensors.Entry(BIAS, new long[] {vocab}, bias)));
    }

    /** Reads {@code lm_head.weight} and {@code lm_head.bias} from a safetensors file (other tensors are ignored). */
    public static LinearHead load(Path file) {
        try (SafeTensorsFile f = SafeTensorsFile.open(file)) {
            TensorInfo w = f.find(WEIGHT).orElseThrow(() -> new CheckpointException(file + ": missing tensor '" + WEIGHT + "'"));
            TensorInfo b = f.find(BIAS).orElseThrow(() -> new CheckpointException(file + ": missing tensor '" + BIAS + "'"));
            long[] ws = w.shape(), bs = b.shape();
            if (ws.length != 2 || bs.length != 1 || bs[0] != ws[0] || ws[0] < 1 || ws[1] < 1 || ws[0] * ws[1] > Integer.MAX_VALUE - 8)
                throw new CheckpointException(file + ": head shapes " + Arrays.toString(ws) + " and " + Arrays.toString(bs)
                        + " are not [vocab, dModel] and [vocab]");
            try {
                return new LinearHead((int) ws[0], (int) ws[1], f.readFloats(WEIGHT), f.readFloats(BIAS));
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
