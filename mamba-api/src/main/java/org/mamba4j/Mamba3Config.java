package org.mamba4j;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import org.mamba4j.nativ.global.libmamba;

/**
 * Hyper-parameters of a Mamba-3 SISO backbone (state-spaces/mamba {@code Mamba3} mixer). Defaults are the
 * official ones: d_state 128, expand 2, headdim 64, one B/C group, rope_fraction 0.5, A_floor 1e-4, Δ init in
 * [0.001, 0.1] with floor 1e-4, chunk 64, the plain SiLU output gate, RMSNorm eps 1e-5; d_model 256 and
 * 4 layers. Derived: {@code dInner = expand·dModel}, {@code nheads = dInner / headdim} and the official
 * number of rotary angles {@link #ropeAngles()}. Immutable; build with {@link #builder()}, which validates every
 * field against libmamba's limits.
 */
public final class Mamba3Config implements ModelConfig {
    /** The architecture tag of Mamba-3 SISO models in checkpoints. */
    static final String ARCH = "mamba3";

    private final int dModel, dState, expand, headdim, ngroups, layers, chunkSize;
    private final float ropeFraction, aFloor, normEps, dtMin, dtMax, dtInitFloor;
    private final boolean outprojNorm;

    private Mamba3Config(Builder b) {
        dModel = b.dModel;
        dState = b.dState;
        expand = b.expand;
        headdim = b.headdim;
        ngroups = b.ngroups;
        layers = b.layers;
        chunkSize = b.chunkSize;
        ropeFraction = b.ropeFraction;
        aFloor = b.aFloor;
        normEps = b.normEps;
        dtMin = b.dtMin;
        dtMax = b.dtMax;
        dtInitFloor = b.dtInitFloor;
        outprojNorm = b.outprojNorm;
    }

    /** A builder holding the defaults. */
    public static Builder builder() {
        return new Builder();
    }

    /** The default configuration (d_model 256, 4 layers, official mixer defaults). */
    public static Mamba3Config defaults() {
        return builder().build();
    }

    /** A builder starting from this configuration's values. */
    public Builder toBuilder() {
        return new Builder().dModel(dModel).dState(dState).expand(expand).headdim(headdim).ngroups(ngroups)
                .layers(layers).chunkSize(chunkSize).ropeFraction(ropeFraction).aFloor(aFloor).normEps(normEps)
                .dtMin(dtMin).dtMax(dtMax).dtInitFloor(dtInitFloor).outprojNorm(outprojNorm);
    }

    /** Always {@code "mamba3"}. */
    @Override
    public String arch() { return ARCH; }
    @Override
    public int dModel() { return dModel; }
    /** The state size per head (the query/key width). */
    public int dState() { return dState; }
    public int expand() { return expand; }
    /** The inner width {@code expand · dModel}. */
    public int dInner() { return expand * dModel; }
    /** Channels per head. */
    public int headdim() { return headdim; }
    /** The number of heads {@code dInner / headdim}. */
    public int nheads() { return dInner() / headdim; }
    /** B/C groups (heads share their group's B and C). */
    public int ngroups() { return ngroups; }
    @Override
    public int layers() { return layers; }
    /** Steps per chunk of the chunked scan and of training's state checkpoints. */
    public int chunkSize() { return chunkSize; }
    /** The rotated share of d_state: 0.5 or 1. */
    public float ropeFraction() { return ropeFraction; }
    /** The official {@code num_rope_angles}: ⌊dState·ropeFraction⌋ rounded down to even, halved. */
    public int ropeAngles() {
        int rotated = (int) Math.floor(dState * (double) ropeFraction);
        if (rotated % 2 != 0) rotated--;
        return rotated / 2;
    }
    /** The bound A ≤ −aFloor of the decay rate. */
    public float aFloor() { return aFloor; }
    /** Block and final RMSNorm epsilon (the B/C and gate norms use the official fixed 1e-5). */
    public float normEps() { return normEps; }
    public float dtMin() { return dtMin; }
    public float dtMax() { return dtMax; }
    public float dtInitFloor() { return dtInitFloor; }
    /** Whether a per-head RMSNormGated replaces the plain SiLU gate before out_proj (official {@code is_outproj_norm}). */
    public boolean outprojNorm() { return outprojNorm; }
    /** Width of one in_proj output row: {@code 2·dInner + 2·ngroups·dState + 3·nheads + ropeAngles}. */
    public int inProjWidth() { return 2 * dInner() + 2 * ngroups * dState + 3 * nheads() + ropeAngles(); }

    /** The native struct of a language model (vocabSize > 0) or a float-input backbone (vocabSize = 0). */
    org.mamba4j.nativ.ModelConfig toNative(int inputDim, int vocabSize, boolean tieEmbeddings) {
        return new org.mamba4j.nativ.ModelConfig().arch(libmamba.ARCH_MAMBA3_SISO).vocab_size(vocabSize)
                .tie_embeddings(tieEmbeddings).d_model(dModel).d_state(dState).expand(expand).headdim(headdim)
                .ngroups(ngroups).n_layers(layers).chunk_size(chunkSize).rope_fraction(ropeFraction).a_floor(aFloor)
                .is_outproj_norm(outprojNorm).input_dim(inputDim).norm_eps(normEps).dt_min(dtMin).dt_max(dtMax)
                .dt_init_floor(dtInitFloor);
    }

    /** The fields under their checkpoint-metadata names (the official {@code Mamba3} argument names). */
    Map<String, Object> toMap() {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("d_model", dModel);
        m.put("d_state", dState);
        m.put("expand", expand);
        m.put("headdim", headdim);
        m.put("ngroups", ngroups);
        m.put("n_layers", layers);
        m.put("chunk_size", chunkSize);
        m.put("rope_fraction", ropeFraction);
        m.put("A_floor", aFloor);
        m.put("is_outproj_norm", outprojNorm);
        m.put("norm_eps", normEps);
        m.put("dt_min", dtMin);
        m.put("dt_max", dtMax);
        m.put("dt_init_floor", dtInitFloor);
        return m;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Mamba3Config c && toMap().equals(c.toMap());
    }

    @Override
    public int hashCode() {
        return toMap().hashCode();
    }

    @Override
    public String toString() {
        return "Mamba3Config" + toMap();
    }

    /** Fluent builder; {@link #build()} validates (the limits live in libmamba, one place for both languages). */
    public static final class Builder {
        private int dModel = 256, dState = 128, expand = 2, headdim = 64, ngroups = 1, layers = 4, chunkSize = 64;
        private float ropeFraction = 0.5f, aFloor = 1e-4f, normEps = 1e-5f, dtMin = 0.001f, dtMax = 0.1f,
                dtInitFloor = 1e-4f;
        private boolean outprojNorm = false;

        private Builder() {}

        /** Model width d_model, 1…65536 (default 256). */
        public Builder dModel(int v) { dModel = v; return this; }
        /** State size per head, 1…256 (default 128); headdim·dState ≤ 16384. */
        public Builder dState(int v) { dState = v; return this; }
        /** Inner width factor, 1…16 (default 2). */
        public Builder expand(int v) { expand = v; return this; }
        /** Channels per head, 1…256, dividing expand·dModel (default 64). */
        public Builder headdim(int v) { headdim = v; return this; }
        /** B/C groups, dividing the number of heads (default 1). */
        public Builder ngroups(int v) { ngroups = v; return this; }
        /** Number of blocks, 1…1024 (default 4). */
        public Builder layers(int v) { layers = v; return this; }
        /** Steps per scan chunk and per training state checkpoint, 1…256 (default 64). */
        public Builder chunkSize(int v) { chunkSize = v; return this; }
        /** Rotated share of d_state: 0.5 (default) or 1. */
        public Builder ropeFraction(double v) { ropeFraction = (float) v; return this; }
        /** Decay floor in (0, 1) (default 1e-4). */
        public Builder aFloor(double v) { aFloor = (float) v; return this; }
        /** Block/final RMSNorm epsilon in (0, 1) (default 1e-5). */
        public Builder normEps(double v) { normEps = (float) v; return this; }
        /** Lower bound of the Δ initialisation (default 0.001). */
        public Builder dtMin(double v) { dtMin = (float) v; return this; }
        /** Upper bound of the Δ initialisation (default 0.1). */
        public Builder dtMax(double v) { dtMax = (float) v; return this; }
        /** Floor of the Δ initialisation (default 1e-4). */
        public Builder dtInitFloor(double v) { dtInitFloor = (float) v; return this; }
        /** Per-head RMSNormGated before out_proj (official {@code is_outproj_norm}, default false). */
        public Builder outprojNorm(boolean v) { outprojNorm = v; return this; }

        /**
         * Validates and builds.
         *
         * @throws InvalidConfigException naming the first field out of range and its limit
         */
        public Mamba3Config build() {
            Mamba3Config c = new Mamba3Config(this);
            Native.load();  // toNative needs the natives
            ModelConfigs.validate(c.toNative(0, 0, true), "Mamba3Config");
            return c;
        }
    }
}
