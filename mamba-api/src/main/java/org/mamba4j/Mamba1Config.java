package org.mamba4j;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import org.mamba4j.nativ.global.libmamba;

/**
 * Hyper-parameters of a Mamba-1 backbone (state-spaces/mamba {@code Mamba} mixer). Defaults follow the
 * reference: d_state 16, d_conv 4, expand 2, dt_rank ⌈d_model/16⌉, RMSNorm eps 1e-5, Δ init in
 * [0.001, 0.1] with floor 1e-4; d_model 128 and 3 layers as in the reference Rust crate.
 * Immutable; build with {@link #builder()}, which validates every field.
 */
public final class Mamba1Config implements ModelConfig {
    /** The architecture tag of Mamba-1 models in checkpoints. */
    static final String ARCH = "mamba1";

    private final int dModel, dState, dConv, expand, dtRank, layers;
    private final float normEps, dtMin, dtMax, dtInitFloor;

    private Mamba1Config(Builder b) {
        dModel = b.dModel;
        dState = b.dState;
        dConv = b.dConv;
        expand = b.expand;
        dtRank = b.dtRank;
        layers = b.layers;
        normEps = b.normEps;
        dtMin = b.dtMin;
        dtMax = b.dtMax;
        dtInitFloor = b.dtInitFloor;
    }

    /** A builder holding the defaults. */
    public static Builder builder() {
        return new Builder();
    }

    /** The default configuration (d_model 128, 3 layers). */
    public static Mamba1Config defaults() {
        return builder().build();
    }

    /** A builder starting from this configuration's values. */
    public Builder toBuilder() {
        return new Builder().dModel(dModel).dState(dState).dConv(dConv).expand(expand).dtRank(dtRank)
                .layers(layers).normEps(normEps).dtMin(dtMin).dtMax(dtMax).dtInitFloor(dtInitFloor);
    }

    /** Always {@code "mamba1"}. */
    @Override
    public String arch() { return ARCH; }
    @Override
    public int dModel() { return dModel; }
    public int dState() { return dState; }
    public int dConv() { return dConv; }
    public int expand() { return expand; }
    /** The inner width {@code expand · dModel}. */
    public int dInner() { return expand * dModel; }
    /** The Δ projection rank, resolved ("auto" = ⌈dModel/16⌉). */
    public int dtRank() { return dtRank > 0 ? dtRank : (dModel + 15) / 16; }
    @Override
    public int layers() { return layers; }
    public float normEps() { return normEps; }
    public float dtMin() { return dtMin; }
    public float dtMax() { return dtMax; }
    public float dtInitFloor() { return dtInitFloor; }

    /** The native struct for this configuration with the given input width (0 = no input projection). */
    org.mamba4j.nativ.ModelConfig toNative(int inputDim) {
        return toNative(inputDim, 0, true);
    }

    /** The native struct of a language model (vocabSize > 0) or a float-input backbone (vocabSize = 0). */
    org.mamba4j.nativ.ModelConfig toNative(int inputDim, int vocabSize, boolean tieEmbeddings) {
        return new org.mamba4j.nativ.ModelConfig().arch(libmamba.ARCH_MAMBA1).vocab_size(vocabSize).tie_embeddings(tieEmbeddings).d_model(dModel).d_state(dState).d_conv(dConv).expand(expand)
                .dt_rank(dtRank).n_layers(layers).input_dim(inputDim).norm_eps(normEps).dt_min(dtMin)
                .dt_max(dtMax).dt_init_floor(dtInitFloor);
    }

    /** The fields under their checkpoint-metadata names. */
    Map<String, Object> toMap() {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("d_model", dModel);
        m.put("d_state", dState);
        m.put("d_conv", dConv);
        m.put("expand", expand);
        m.put("dt_rank", dtRank());
        m.put("n_layers", layers);
        m.put("norm_eps", normEps);
        m.put("dt_min", dtMin);
        m.put("dt_max", dtMax);
        m.put("dt_init_floor", dtInitFloor);
        return m;
    }

    @Override
    public boolean equals(Object o) {
        if (!(o instanceof Mamba1Config)) return false;
        Mamba1Config c = (Mamba1Config) o;
        return dModel == c.dModel && dState == c.dState && dConv == c.dConv && expand == c.expand
                && dtRank() == c.dtRank() && layers == c.layers && normEps == c.normEps && dtMin == c.dtMin
                && dtMax == c.dtMax && dtInitFloor == c.dtInitFloor;
    }

    @Override
    public int hashCode() {
        return Objects.hash(dModel, dState, dConv, expand, dtRank(), layers, normEps, dtMin, dtMax, dtInitFloor);
    }

    @Override
    public String toString() {
        return "Mamba1Config" + toMap();
    }

    /** Fluent builder; {@link #build()} validates (the limits live in libmamba, one place for both languages). */
    public static final class Builder {
        private int dModel = 128, dState = 16, dConv = 4, expand = 2, dtRank = 0, layers = 3;
        private float normEps = 1e-5f, dtMin = 0.001f, dtMax = 0.1f, dtInitFloor = 1e-4f;

        private Builder() {}

        /** Model width d_model, 1…65536 (default 128). */
        public Builder dModel(int v) { dModel = v; return this; }
        /** SSM state size per channel, 1…256 (default 16). */
        public Builder dState(int v) { dState = v; return this; }
        /** Causal conv width, 1…8 (default 4). */
        public Builder dConv(int v) { dConv = v; return this; }
        /** Inner width factor, 1…16 (default 2); d_inner = expand·d_model ≤ 65536. */
        public Builder expand(int v) { expand = v; return this; }
        /** Δ projection rank; 0 = auto ⌈d_model/16⌉ (default). */
        public Builder dtRank(int v) { dtRank = v; return this; }
        /** Number of Mamba blocks, 1…1024 (default 3). */
        public Builder layers(int v) { layers = v; return this; }
        /** RMSNorm epsilon in (0, 1) (default 1e-5). */
        public Builder normEps(double v) { normEps = (float) v; return this; }
        /** Lower bound of the Δ initialisation (default 0.001). */
        public Builder dtMin(double v) { dtMin = (float) v; return this; }
        /** Upper bound of the Δ initialisation (default 0.1). */
        public Builder dtMax(double v) { dtMax = (float) v; return this; }
        /** Floor of the Δ initialisation (default 1e-4). */
        public Builder dtInitFloor(double v) { dtInitFloor = (float) v; return this; }

        /**
         * Validates and builds.
         *
         * @throws InvalidConfigException naming the first field out of range and its limit
         */
        public Mamba1Config build() {
            Mamba1Config c = new Mamba1Config(this);
            Native.load();  // toNative needs the natives
            ModelConfigs.validate(c.toNative(0), "Mamba1Config");
            return c;
        }
    }
}
