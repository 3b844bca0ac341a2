package org.mamba4j.lm;

import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.mamba4j.BackwardOptions;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.Mamba3Config;
import org.mamba4j.MambaModel;
import org.mamba4j.MambaState;
import org.mamba4j.Trainer;
import org.mamba4j.io.SafeTensorsFile;
import org.mamba4j.io.TensorInfo;

/**
 * mamba4j's Mamba-3 SISO against the official state-spaces/mamba code, on random official folders made on the
 * device by scripts/mamba3_official_reference.py (folder given by MAMBA4J_M3_REFERENCE or -Dmamba4j.m3Reference;
 * skipped without it or without a CUDA device). The references are the official PyTorch path in float64 on the
 * saved float32 weights (see that script). For each folder, on the CPU (F32) and on CUDA (F32, BF16):
 * <ul>
 *   <li>forward: every position's logits from a zero state ({@code forwardTokens});</li>
 *   <li>step: the whole sequence one token at a time from a zero state ({@code stepTokens});</li>
 *   <li>prefill + decode: {@code prefillTokens} of the prompt, every layer's state (S, k, v, θ; θ compared on the
 *       circle) against the official final states, then the rest one token at a time;</li>
 *   <li>handoff: {@code forwardTokens} of the first 37 tokens, then of the rest with the state carried (the second
 *       call starts from non-zero S, k, v and θ);</li>
 *   <li>gradients: the backbone (no vocabulary) under a {@link Trainer}, fed the embedding rows; the loss
 *       sum(logits ⊙ R) with the reference's R, logits = hidden · headᵀ formed here in double; every official
 *       parameter's gradient (tied: embedding = head part + scattered input gradient).</li>
 * </ul>
 * Pass: relative L2 over the whole tensor ≤ 1e-4 for F32 storage; ≤ 5e-2 for BF16 storage (bf16 weights and
 * products; the trainer's backward runs in f32 on the f32 master weights). Every figure is measured and printed
 * as one table (quantity × backend × dtype: rel L2, max abs) before the assertion.
 *
 * <p>Until the official-folder loader lands, {@link Official} reads the folder itself: config.json in the official
 * MambaConfig format (ssm_cfg.layer = "Mamba3", official defaults for absent keys) and model.safetensors under the
 * official names (mamba4j names the embedding {@code backbone.embeddings.weight}).
 */
@Tag("gpu")
class Mamba3OfficialParityTest {
    private static final double TOL_F32 = 1e-4, TOL_BF16 = 5e-2;
    private static final int HANDOFF = 37;
    private static final ObjectMapper JSON = new ObjectMapper();

    private static Path root() {
        String dir = System.getProperty("mamba4j.m3Reference", System.getenv("MAMBA4J_M3_REFERENCE"));
        Assumptions.assumeTrue(dir != null && Files.isDirectory(Path.of(dir)), "no MAMBA4J_M3_REFERENCE folder");
        Assumptions.assumeTrue(Device.cudaCount() > 0, "no CUDA device: " + Device.cudaUnavailableReason());
        return Path.of(dir);
    }

    /** An official Mamba-3 folder read without the library's loader. */
    record Official(Mamba3Config config, int vocab, boolean tied, Map<String, float[]> weights) {
        static final String EMB = "backbone.embedding.weight", HEAD = "lm_head.weight";

        static Official read(Path folder) throws IOException {
            JsonNode c = JSON.readTree(folder.resolve("config.json").toFile());
            JsonNode s = c.path("ssm_cfg");
            if (!"Mamba3".equals(s.path("layer").asText()))
                throw new IllegalArgumentException(folder + ": ssm_cfg.layer is not Mamba3");
            if (c.path("d_intermediate").asInt(0) != 0 || c.path("attn_layer_idx").size() > 0 || !c.path("rms_norm").asBoolean(true))
                throw new IllegalArgumentException(folder + ": MLP, attention or LayerNorm blocks are not Mamba-3 SISO");
            Mamba3Config cfg = Mamba3Config.builder()
                    .dModel(c.path("d_model").asInt()).layers(c.path("n_layer").asInt())
                    .dState(s.path("d_state").asInt(128)).headdim(s.path("headdim").asInt(64)).expand(s.path("expand").asInt(2))
                    .ngroups(s.path("ngroups").asInt(1)).ropeFraction(s.path("rope_fraction").asDouble(0.5))
                    .aFloor(s.path("A_floor").asDouble(1e-4)).outprojNorm(s.path("is_outproj_norm").asBoolean(false))
                    .chunkSize(s.path("chunk_size").asInt(64)).build();
            Map<String, float[]> w = new LinkedHashMap<>();
            int vocab;
            try (SafeTensorsFile f = SafeTensorsFile.open(folder.resolve("model.safetensors"))) {
                for (TensorInfo t : f.tensors()) w.put(t.name(), f.readFloats(t.name()));
                vocab = (int) f.get(EMB).shape()[0];
            }
            return new Official(cfg, vocab, c.path("tie_embeddings").asBoolean(true), w);
        }

        static String officialName(String ours) {
            return ours.equals("backbone.embeddings.weight") ? EMB : ours;
        }

        float[] head() {
            return tied ? weights.get(EMB) : weights.get(HEAD);
        }

        /** The language model (vocab > 0) or the bare backbone (vocab 0: float inputs of width d_model). */
        MambaModel build(Device device, DType dtype, boolean lm) {
            MambaModel.Builder b = MambaModel.builder(config).device(device).dtype(dtype);
            if (lm) b.vocabSize(vocab).tieEmbeddings(tied);
            MambaModel m = b.build();
            try {
                Set<String> used = new HashSet<>();
                for (String name : m.parameterNames()) {
                    String o = officialName(name);
                    float[] v = weights.get(o);
                    if (v == null) throw new IllegalStateException("the official folder has no " + o);
                    m.setParameter(name, v);
                    used.add(o);
                }
                for (String o : weights.keySet()) {
                    boolean lmOnly = o.equals(EMB) || o.equals(HEAD);
                    if (!used.contains(o) && (lm || !lmOnly))
                        throw new IllegalStateException("official tensor " + o + " has no mamba4j parameter");
                }
                return m;
            } catch (RuntimeException e) {
                m.close();
                throw e;
            }
        }
    }

    /** One line of the error table. */
    record Row(String shape, String backend, DType dtype, String quantity, double relL2, double maxAbs, double tol) {
        boolean ok() {
            return relL2 <= tol;  // NaN fails
        }

        @Override
        public String toString() {
            return String.format("| %s | %s | %s | %s | %.2e | %.2e | %s |", shape, backend, dtype, quantity, relL2, maxAbs,
                    ok() ? "ok" : "FAIL (tol " + tol + ")");
        }
    }

    private final List<Row> rows = new ArrayList<>();

    @Test
    void matchesTheOfficialFloat64Reference() throws Exception {
        Path root = root();
        List<Device> devices = List.of(Device.cpu(), Device.cuda(0));
        try (var shapes = Files.list(root)) {
            for (Path folder : shapes.filter(p -> Files.isRegularFile(p.resolve("reference.safetensors"))).sorted().toList()) {
                Official off = Official.read(folder);
                Map<String, float[]> ref = new LinkedHashMap<>();
                Map<String, String> meta;
                try (SafeTensorsFile r = SafeTensorsFile.open(folder.resolve("reference.safetensors"))) {
                    meta = r.metadata();
                    for (TensorInfo t : r.tensors()) ref.put(t.name(), r.readFloats(t.name()));
                }
                String shape = folder.getFileName().toString();
                for (Device device : devices) {
                    for (DType dtype : device.isCpu() ? new DType[] {DType.F32} : new DType[] {DType.F32, DType.BF16}) {
                        double tol = dtype == DType.F32 ? TOL_F32 : TOL_BF16;
                        String backend = device.isCpu() ? "CPU" : "CUDA";
                        try {
                            inference(shape, backend, dtype, tol, off, ref, meta, device);
                        } catch (RuntimeException e) {
                            add(shape, backend, dtype, "inference: " + e, Double.NaN, Double.NaN, tol);
                        }
                        try {
                            gradients(shape, backend, dtype, tol, off, ref, meta, device);
                        } catch (RuntimeException e) {
                            add(shape, backend, dtype, "gradients: " + e, Double.NaN, Double.NaN, tol);
                        }
                    }
                }
            }
        }
        System.out.println("\nmamba4j vs the official float64 reference (rel L2 over the whole tensor, max abs):");
        System.out.println("| shape | backend | dtype | quantity | rel L2 | max abs | |\n|---|---|---|---|---|---|---|");
        List<Row> failures = new ArrayList<>();
        for (Row r : rows) {
            System.out.println(r);
            if (!r.ok()) failures.add(r);
        }
        assertTrue(!rows.isEmpty(), "no reference folders under " + root);
        assertTrue(failures.isEmpty(), failures.size() + " of " + rows.size() + " outside tolerance: " + failures);
    }

    private void inference(String shape, String backend, DType dtype, double tol, Official off, Map<String, float[]> ref,
                           Map<String, String> meta, Device device) {
        int B = Integer.parseInt(meta.get("batch")), T = Integer.parseInt(meta.get("steps"));
        int P = Integer.parseInt(meta.get("prompt_len")), V = Integer.parseInt(meta.get("vocab"));
        int[] ids = ints(ref.get("input_ids"));
        float[] logits = ref.get("logits");
        try (MambaModel lm = off.build(device, dtype, true)) {
            if (lm.vocabSize() != V) throw new IllegalStateException("vocab " + lm.vocabSize() + " != reference " + V);
            add(shape, backend, dtype, "logits (forward)", lm.forwardTokens(null, ids, B, T), logits, tol);

            try (MambaState s = lm.newState(B)) {
                float[] got = new float[B * T * V], one = new float[B * V];
                for (int t = 0; t < T; t++) {
                    lm.stepTokens(s, column(ids, B, T, t), one);
                    put(got, one, B, T, V, t);
                }
                add(shape, backend, dtype, "logits (step from zero)", got, logits, tol);
            }

            try (MambaState s = lm.newState(B)) {
                float[] last = new float[B * V];
                lm.prefillTokens(s, slice(ids, B, T, 0, P), P, last);
                add(shape, backend, dtype, "logits (prefill, last position)", last, positions(logits, B, T, V, P - 1, P), tol);
                compareStates(shape, backend, dtype, tol, off.config(), s, ref, B);
                float[] got = new float[B * (T - P) * V], one = new float[B * V];
                for (int t = P; t < T; t++) {
                    lm.stepTokens(s, column(ids, B, T, t), one);
                    put(got, one, B, T - P, V, t - P);
                }
                add(shape, backend, dtype, "logits (decode after prefill)", got, ref.get("decode_logits"), tol);
            }

            try (MambaState s = lm.newState(B)) {
                float[] a = lm.forwardTokens(s, slice(ids, B, T, 0, HANDOFF), B, HANDOFF);
                float[] b = lm.forwardTokens(s, slice(ids, B, T, HANDOFF, T), B, T - HANDOFF);
                float[] got = new float[B * T * V];
                for (int r = 0; r < B; r++) {
                    System.arraycopy(a, r * HANDOFF * V, got, r * T * V, HANDOFF * V);
                    System.arraycopy(b, r * (T - HANDOFF) * V, got, (r * T + HANDOFF) * V, (T - HANDOFF) * V);
                }
                add(shape, backend, dtype, "logits (handoff at " + HANDOFF + ")", got, logits, tol);
            }
        }
    }

    /** Per layer and row: S [nh, hd, ds], k [nh, ds], v [nh, hd], θ [nh, na] (ops.h Mamba3ScanArgs). */
    private void compareStates(String shape, String backend, DType dtype, double tol, Mamba3Config c, MambaState s,
                               Map<String, float[]> ref, int B) {
        int nh = c.nheads(), hd = c.headdim(), ds = c.dState(), na = c.ropeAngles();
        int[] sizes = {nh * hd * ds, nh * ds, nh * hd, nh * na};
        String[] names = {"ssm", "k", "v", "angle"};
        int layer = sizes[0] + sizes[1] + sizes[2] + sizes[3];
        if (s.rowSize() != (long) layer * c.layers())
            throw new IllegalStateException("state row " + s.rowSize() + " != layers × " + layer);
        double[][] worst = new double[4][];
        for (int l = 0; l < c.layers(); l++) {
            float[][] got = new float[4][];
            for (int q = 0; q < 4; q++) got[q] = new float[B * sizes[q]];
            for (int r = 0; r < B; r++) {
                float[] row = s.readRow(r);
                int off = l * layer;
                for (int q = 0; q < 4; q++) {
                    System.arraycopy(row, off, got[q], r * sizes[q], sizes[q]);
                    off += sizes[q];
                }
            }
            for (int q = 0; q < 4; q++) {
                double[] e = err(got[q], ref.get("state." + l + "." + names[q]), q == 3);
                if (worst[q] == null || !(e[0] <= worst[q][0])) worst[q] = e;
            }
        }
        for (int q = 0; q < 4; q++)
            add(shape, backend, dtype, "state " + names[q] + " after prefill (worst layer)", worst[q][0], worst[q][1], tol);
    }

    private void gradients(String shape, String backend, DType dtype, double tol, Official off, Map<String, float[]> ref,
                           Map<String, String> meta, Device device) {
        if (!Trainer.supports(device)) {
            add(shape, backend, dtype, "gradients: no training on " + device, Double.NaN, Double.NaN, tol);
            return;
        }
        int B = Integer.parseInt(meta.get("batch")), T = Integer.parseInt(meta.get("steps"));
        int V = Integer.parseInt(meta.get("vocab")), D = off.config().dModel();
        int[] ids = ints(ref.get("input_ids"));
        float[] R = ref.get("grad_proj"), E = off.weights().get(Official.EMB), H = off.head();
        try (MambaModel bb = off.build(device, dtype, false); Trainer tr = Trainer.builder(bb).batch(B).seqLen(T).build()) {
            float[] x = new float[B * T * D];
            for (int i = 0; i < B * T; i++) System.arraycopy(E, ids[i] * D, x, i * D, D);
            float[] h = tr.forward(x);
            float[] dh = new float[B * T * D];
            double[] acc = new double[D];
            for (int i = 0; i < B * T; i++) {
                java.util.Arrays.fill(acc, 0);
                for (int v = 0; v < V; v++) {
                    double rv = R[i * V + v];
                    for (int d = 0; d < D; d++) acc[d] += rv * H[v * D + d];
                }
                for (int d = 0; d < D; d++) dh[i * D + d] = (float) acc[d];
            }
            tr.backward(dh, BackwardOptions.accumulate());
            float[] dx = tr.inputGradient();
            double[] headGrad = new double[V * D];  // Σ_i R[i, v] · h[i, :]
            for (int i = 0; i < B * T; i++)
                for (int v = 0; v < V; v++) {
                    double rv = R[i * V + v];
                    for (int d = 0; d < D; d++) headGrad[v * D + d] += rv * h[i * D + d];
                }
            double worst = -1, worstAbs = 0;
            String worstName = "";
            for (String key : ref.keySet()) {
                if (!key.startsWith("grad.")) continue;
                String name = key.substring(5);
                float[] got;
                if (name.equals(Official.EMB) || name.equals(Official.HEAD)) {
                    double[] g = name.equals(Official.HEAD) || off.tied() ? headGrad.clone() : new double[V * D];
                    if (name.equals(Official.EMB))
                        for (int i = 0; i < B * T; i++)
                            for (int d = 0; d < D; d++) g[ids[i] * D + d] += dx[i * D + d];
                    got = new float[g.length];
                    for (int j = 0; j < g.length; j++) got[j] = (float) g[j];
                } else {
                    got = tr.gradient(name);
                }
                double[] e = err(got, ref.get(key), false);
                if (!(e[0] <= worst)) {
                    worst = e[0];
                    worstAbs = e[1];
                    worstName = name;
                }
                if (!(e[0] <= tol)) add(shape, backend, dtype, "grad " + name, e[0], e[1], tol);
            }
            add(shape, backend, dtype, "gradients, worst tensor (" + worstName + ")", worst, worstAbs, tol);
        }
    }

    // ---- helpers

    private void add(String shape, String backend, DType dtype, String quantity, float[] got, float[] ref, double tol) {
        double[] e = err(got, ref, false);
        add(shape, backend, dtype, quantity, e[0], e[1], tol);
    }

    private void add(String shape, String backend, DType dtype, String quantity, double rel, double abs, double tol) {
        Row r = new Row(shape, backend, dtype, quantity, rel, abs, tol);
        rows.add(r);
        System.out.println(r);
    }

    /** {rel L2 over the whole tensor, max abs}; angles are compared on the circle (difference wrapped to [-π, π)). */
    static double[] err(float[] got, float[] ref, boolean angle) {
        if (got.length != ref.length) throw new IllegalStateException("length " + got.length + " != reference " + ref.length);
        double n = 0, d = 0, max = 0;
        for (int i = 0; i < got.length; i++) {
            double diff = (double) got[i] - ref[i];
            if (angle) diff = diff - 2 * Math.PI * Math.floor((diff + Math.PI) / (2 * Math.PI));
            if (Double.isNaN(diff)) return new double[] {Double.NaN, Double.NaN};
            n += diff * diff;
            d += (double) ref[i] * ref[i];
            max = Math.max(max, Math.abs(diff));
        }
        return new double[] {Math.sqrt(n / Math.max(d, 1e-300)), max};
    }

    private static int[] ints(float[] f) {
        int[] r = new int[f.length];
        for (int i = 0; i < f.length; i++) r[i] = (int) f[i];
        return r;
    }

    /** ids [B, T] → ids[:, from:to] */
    private static int[] slice(int[] ids, int B, int T, int from, int to) {
        int n = to - from;
        int[] r = new int[B * n];
        for (int b = 0; b < B; b++) System.arraycopy(ids, b * T + from, r, b * n, n);
        return r;
    }

    private static int[] column(int[] ids, int B, int T, int t) {
        int[] r = new int[B];
        for (int b = 0; b < B; b++) r[b] = ids[b * T + t];
        return r;
    }

    /** x [B, T, V] → x[:, from:to, :] */
    private static float[] positions(float[] x, int B, int T, int V, int from, int to) {
        int n = to - from;
        float[] r = new float[B * n * V];
        for (int b = 0; b < B; b++) System.arraycopy(x, (b * T + from) * V, r, b * n * V, n * V);
        return r;
    }

    /** dst [B, T, V] at position t ← one [B, V] */
    private static void put(float[] dst, float[] one, int B, int T, int V, int t) {
        for (int b = 0; b < B; b++) System.arraycopy(one, b * V, dst, (b * T + t) * V, V);
    }
}
