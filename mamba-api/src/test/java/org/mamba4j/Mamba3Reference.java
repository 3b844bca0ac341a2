package org.mamba4j;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Random;

/**
 * An independent double-precision Mamba-3 SISO model, written from the reference note
 * (/work/shared/reference/mamba3-siso.md §3 forward, §4 backward) and the contract in ops.h
 * ({@code Mamba3ScanArgs}), with no code shared with libmamba: plain loops and libm.
 *
 * <p>It reads the weights of a {@link MambaModel} once (mutable double arrays by name, so a test can perturb
 * single elements) and runs the whole model: the input stage (token embedding, input projection, or none),
 * the blocks {@code r ← r + out_proj(mixer(in_proj(RMSNorm(r))))}, norm_f, and a language model's head (tied
 * or not). The recurrent state is kept per row in the model's own layout (see {@link #layerSize}), in double,
 * so a state row read from a {@link MambaState} can be loaded and compared directly.
 *
 * <p>The angle update is the contract's: {@code θ ← wrap(θ + π·tanh(θ̇)·Δ)} with wrap into [0, 2π) at every
 * step (here in double). Gradients: {@link #backward} is the analytic backpropagation through time of
 * {@code L = Σ dOut ⊙ out} (the note's §4) through the whole model, with the start state held constant
 * (truncated BPTT, as the trainer defines it). {@link #forwardQuadratic} is a second, independent evaluation
 * of the mixer in the chunk-free quadratic form of §3 (with the incoming K/V state folded into S₀), used to
 * check the recurrence itself.
 */
final class Mamba3Reference {
    /** The fixed epsilon of the B/C norms and of the gated output norm (official, not configurable). */
    static final double INNER_EPS = 1e-5;
    private static final double TWO_PI = 2 * Math.PI;

    final int dModel, dState, dInner, headdim, nheads, ngroups, nangles, layers, inputDim, vocab, proj;
    final boolean tied, gateNorm;
    final double eps, aFloor;
    /** Offsets inside one layer's state: S [H][P][N], k_prev [H][N], v_prev [H][P], θ [H][NA]. */
    final int kOff, vOff, thOff, layerSize;
    /** In_proj field columns: [z | x | B | C | dd_dt | dd_A | trap | angles]. */
    final int zCol, xCol, bCol, cCol, dtCol, aCol, trapCol, angCol;
    /** Weights by name, as the model names them; perturb in place. */
    final Map<String, double[]> w = new LinkedHashMap<>();

    Mamba3Reference(MambaModel model) {
        Mamba3Config c = (Mamba3Config) model.config();  // the reference implements Mamba-3 SISO only
        dModel = c.dModel();
        dState = c.dState();
        dInner = c.dInner();
        headdim = c.headdim();
        nheads = c.nheads();
        ngroups = c.ngroups();
        nangles = c.ropeAngles();
        layers = c.layers();
        eps = c.normEps();
        aFloor = c.aFloor();
        gateNorm = c.outprojNorm();
        inputDim = model.inputDim();
        vocab = model.vocabSize();
        tied = vocab > 0 && model.tieEmbeddings();
        proj = 2 * dInner + 2 * ngroups * dState + 3 * nheads + nangles;
        if (proj != c.inProjWidth()) throw new AssertionError("in_proj width " + proj + " vs " + c.inProjWidth());
        zCol = 0;
        xCol = dInner;
        bCol = 2 * dInner;
        cCol = bCol + ngroups * dState;
        dtCol = cCol + ngroups * dState;
        aCol = dtCol + nheads;
        trapCol = aCol + nheads;
        angCol = trapCol + nheads;
        kOff = nheads * headdim * dState;
        vOff = kOff + nheads * dState;
        thOff = vOff + nheads * headdim;
        layerSize = thOff + nheads * nangles;
        for (String name : model.parameterNames()) w.put(name, toDouble(model.getParameter(name)));
    }

    /** Floats per row of a state (every layer's state, layer after layer). */
    int rowSize() { return layers * layerSize; }

    /** Width of one input position (0 for token ids). */
    int inputWidth() { return vocab > 0 ? 0 : inputDim > 0 ? inputDim : dModel; }

    /** Width of one output position: logits of a language model, else d_model. */
    int outputWidth() { return vocab > 0 ? vocab : dModel; }

    // ---------------------------------------------------------------- states

    double[][] zeroState(int batch) {
        return new double[batch][rowSize()];
    }

    static double[][] copy(double[][] s) {
        double[][] c = new double[s.length][];
        for (int b = 0; b < s.length; b++) c[b] = s[b].clone();
        return c;
    }

    /** The model state's rows, in double. */
    static double[][] read(MambaState s) {
        double[][] out = new double[s.batch()][];
        for (int b = 0; b < s.batch(); b++) out[b] = toDouble(s.readRow(b));
        return out;
    }

    /**
     * A random state row in the working regime: S, k_prev, v_prev uniform in ±scale and every angle in [0, 2π),
     * a third of them within 0.05 of 2π (so the first step's update crosses the wrap).
     */
    float[] randomStateRow(Random rng, double scale) {
        float[] row = new float[rowSize()];
        for (int l = 0; l < layers; l++) {
            int o = l * layerSize;
            for (int i = 0; i < thOff; i++) row[o + i] = (float) ((rng.nextDouble() * 2 - 1) * scale);
            for (int i = thOff; i < layerSize; i++) {
                double th = rng.nextInt(3) == 0 ? TWO_PI - 0.05 * rng.nextDouble() : TWO_PI * rng.nextDouble();
                float f = (float) th;
                if (f >= (float) TWO_PI) f = Math.nextDown((float) TWO_PI);
                row[o + i] = f;
            }
        }
        return row;
    }

    /** Whether index i of a row is an angle (compared modulo 2π). */
    boolean isAngle(int i) {
        return i % layerSize >= thOff;
    }

    /**
     * Relative L2 distance of a state row to a reference row, angles taken modulo 2π: ‖got − want‖ / ‖want‖
     * over S, K, V, and separately the largest circular angle distance (returned as [rel, maxAngle]).
     */
    double[] stateError(float[] got, double[] want) {
        double num = 0, den = 0, ang = 0;
        for (int i = 0; i < want.length; i++) {
            if (isAngle(i)) {
                double d = Math.abs(got[i] - want[i]) % TWO_PI;
                ang = Math.max(ang, Math.min(d, TWO_PI - d));
            } else {
                num += (got[i] - want[i]) * (got[i] - want[i]);
                den += want[i] * want[i];
            }
        }
        return new double[] {Math.sqrt(num / Math.max(den, 1e-300)), ang};
    }

    // ---------------------------------------------------------------- forward

    /** One step of every row: x [B · inputWidth] (or ids [B]) → out [B · outputWidth]; the state advances. */
    double[] step(float[] x, int[] ids, double[][] state) {
        int B = state.length;
        return forward(x == null ? null : toDouble(x), ids, B, 1, state);
    }

    /**
     * Every position's output [B, T, outputWidth] for x [B, T, inputWidth] (or ids [B, T]) starting from
     * {@code state} ([B][rowSize], advanced in place).
     */
    double[] forward(double[] x, int[] ids, int B, int T, double[][] state) {
        double[] out = new double[B * T * outputWidth()];
        for (int b = 0; b < B; b++) {
            Run run = runRow(x, ids, b, T, state[b], false, false);
            for (int t = 0; t < T; t++) System.arraycopy(run.out[t], 0, out, (b * T + t) * outputWidth(), outputWidth());
        }
        return out;
    }

    /** As {@link #forward}, the mixer evaluated in the quadratic (chunk-free, whole-sequence) form instead. */
    double[] forwardQuadratic(double[] x, int[] ids, int B, int T, double[][] state) {
        double[] out = new double[B * T * outputWidth()];
        for (int b = 0; b < B; b++) {
            Run run = runRow(x, ids, b, T, state[b], false, true);
            for (int t = 0; t < T; t++) System.arraycopy(run.out[t], 0, out, (b * T + t) * outputWidth(), outputWidth());
        }
        return out;
    }

    /** Everything one layer's forward over a row keeps for backward. */
    private static final class Tape {
        double[][] rin, nrm, proj, bu, cu, y, g, sArg, delta, a, sig, alpha, beta, gamma, tanhAng, rhoG;
        double[] rho;
        double[][] rhoB, rhoC;
        boolean[][] clamped;
        double[][][] kpre, qpre, k, q, th, S;  // S[t + 1][h] = the state after step t; S[0][h] the incoming one
        double[][] k0, v0;                     // incoming k_prev [H][N], v_prev [H][P]
    }

    /** One row's run: outputs, and with a tape what backward needs. */
    private static final class Run {
        double[][] in;        // [T][inW] the row's input (float models)
        int[] ids;            // [T] (language models)
        double[][] rFinal;    // [T][D] residual after the last block
        double[] rhoF;        // [T]
        double[][] hid;       // [T][D] norm_f output
        double[][] out;       // [T][outW]
        Tape[] tapes;
    }

    private Run runRow(double[] x, int[] ids, int b, int T, double[] st, boolean keep, boolean quadratic) {
        Run run = new Run();
        double[][] r = new double[T][];
        int inW = inputWidth();
        if (vocab > 0) {
            run.ids = new int[T];
            double[] emb = w.get("backbone.embeddings.weight");
            for (int t = 0; t < T; t++) {
                int id = ids[b * T + t];
                run.ids[t] = id;
                r[t] = new double[dModel];
                System.arraycopy(emb, id * dModel, r[t], 0, dModel);
            }
        } else {
            run.in = new double[T][inW];
            for (int t = 0; t < T; t++) {
                System.arraycopy(x, (b * T + t) * inW, run.in[t], 0, inW);
                if (inputDim > 0) {
                    r[t] = matvec(w.get("input_proj.weight"), dModel, inputDim, run.in[t]);
                    double[] bias = w.get("input_proj.bias");
                    for (int i = 0; i < dModel; i++) r[t][i] += bias[i];
                } else {
                    r[t] = run.in[t].clone();
                }
            }
        }
        if (keep) run.tapes = new Tape[layers];
        for (int l = 0; l < layers; l++) {
            Tape tp = layerForward(l, r, T, st, l * layerSize, keep || quadratic, quadratic);
            if (keep) run.tapes[l] = tp;
        }
        run.rFinal = r;
        run.rhoF = new double[T];
        run.hid = new double[T][];
        run.out = new double[T][];
        double[] wf = w.get("backbone.norm_f.weight");
        for (int t = 0; t < T; t++) {
            run.rhoF[t] = rmsScale(r[t], eps);
            run.hid[t] = new double[dModel];
            for (int i = 0; i < dModel; i++) run.hid[t][i] = wf[i] * r[t][i] * run.rhoF[t];
            run.out[t] = vocab > 0 ? matvec(head(), vocab, dModel, run.hid[t]) : run.hid[t];
        }
        return run;
    }

    private double[] head() {
        return w.get(tied ? "backbone.embeddings.weight" : "lm_head.weight");
    }

    private static double[][][] new3(int a, int b, int c) {
        return new double[a][b][c];
    }

    /** One block over all T positions of a row; r is updated in place, the layer's state at st[so…] advances. */
    private Tape layerForward(int l, double[][] r, int T, double[] st, int so, boolean keep, boolean quadratic) {
        String p = "backbone.layers." + l + ".";
        double[] wn = w.get(p + "norm.weight"), win = w.get(p + "mixer.in_proj.weight"), wout = w.get(p + "mixer.out_proj.weight");
        double[] dtb = w.get(p + "mixer.dt_bias"), bb = w.get(p + "mixer.B_bias"), cb = w.get(p + "mixer.C_bias");
        double[] bn = w.get(p + "mixer.B_norm.weight"), cn = w.get(p + "mixer.C_norm.weight"), dsk = w.get(p + "mixer.D");
        double[] wg = gateNorm ? w.get(p + "mixer.norm.weight") : null;
        final int H = nheads, P = headdim, N = dState, NA = nangles, G = ngroups, E = dInner, hpg = H / G;

        Tape tp = new Tape();
        if (keep) {
            tp.rin = new double[T][];
            tp.nrm = new double[T][];
            tp.proj = new double[T][];
            tp.rho = new double[T];
            tp.bu = new double[T][G * N];
            tp.cu = new double[T][G * N];
            tp.rhoB = new double[T][G];
            tp.rhoC = new double[T][G];
            tp.sArg = new double[T][H];
            tp.delta = new double[T][H];
            tp.a = new double[T][H];
            tp.clamped = new boolean[T][H];
            tp.sig = new double[T][H];
            tp.alpha = new double[T][H];
            tp.beta = new double[T][H];
            tp.gamma = new double[T][H];
            tp.tanhAng = new double[T][NA];
            tp.kpre = new3(T, H, N);
            tp.qpre = new3(T, H, N);
            tp.k = new3(T, H, N);
            tp.q = new3(T, H, N);
            tp.th = new3(T, H, NA);
            tp.S = new double[T + 1][H][];
            tp.y = new double[T][];
            tp.g = new double[T][];
            tp.rhoG = new double[T][H];
            tp.k0 = new double[H][N];
            tp.v0 = new double[H][P];
            for (int h = 0; h < H; h++) {
                tp.S[0][h] = new double[P * N];
                System.arraycopy(st, so + h * P * N, tp.S[0][h], 0, P * N);
                System.arraycopy(st, so + kOff + h * N, tp.k0[h], 0, N);
                System.arraycopy(st, so + vOff + h * P, tp.v0[h], 0, P);
            }
        }
        double[][] proj = new double[T][];
        double[][] nrm = new double[T][];
        for (int t = 0; t < T; t++) {
            double rho = rmsScale(r[t], eps);
            nrm[t] = new double[dModel];
            for (int i = 0; i < dModel; i++) nrm[t][i] = wn[i] * r[t][i] * rho;
            proj[t] = matvec(win, this.proj, dModel, nrm[t]);
            if (keep) {
                tp.rin[t] = r[t].clone();
                tp.rho[t] = rho;
                tp.nrm[t] = nrm[t];
                tp.proj[t] = proj[t];
            }
        }

        double[][] y = new double[T][E];
        // Pre-processing and the recurrence, position by position (the state advances in st).
        double[] kq = new double[N];
        for (int t = 0; t < T; t++) {
            double[] pr = proj[t];
            double[] bu = new double[G * N], cu = new double[G * N];
            for (int g = 0; g < G; g++) {
                double rb = rmsScaleSlice(pr, bCol + g * N, N, INNER_EPS), rc = rmsScaleSlice(pr, cCol + g * N, N, INNER_EPS);
                for (int n = 0; n < N; n++) {
                    bu[g * N + n] = pr[bCol + g * N + n] * rb;
                    cu[g * N + n] = pr[cCol + g * N + n] * rc;
                }
                if (keep) {
                    tp.rhoB[t][g] = rb;
                    tp.rhoC[t][g] = rc;
                }
            }
            if (keep) {
                tp.bu[t] = bu;
                tp.cu[t] = cu;
                for (int a = 0; a < NA; a++) tp.tanhAng[t][a] = Math.tanh(pr[angCol + a]);
            }
            for (int h = 0; h < H; h++) {
                int g = h / hpg;
                double sArg = pr[dtCol + h] + dtb[h];
                double delta = softplus(sArg);
                double u = pr[aCol + h];
                double aUn = -heavyTail(u);
                boolean clamped = aUn > -aFloor;
                double A = clamped ? -aFloor : aUn;
                double sig = sigmoid(pr[trapCol + h]);
                double alpha = Math.exp(A * delta), beta = alpha * delta * (1 - sig), gamma = sig * delta;
                double[] th = new double[NA];
                for (int a = 0; a < NA; a++) {
                    double v = st[so + thOff + h * NA + a] + Math.PI * Math.tanh(pr[angCol + a]) * delta;
                    v -= TWO_PI * Math.floor(v / TWO_PI);
                    if (v >= TWO_PI) v -= TWO_PI;  // floor rounding at the top of the range
                    th[a] = v;
                    st[so + thOff + h * NA + a] = v;
                }
                double[] kpre = new double[N], qpre = new double[N];
                for (int n = 0; n < N; n++) {
                    kpre[n] = bn[n] * bu[g * N + n] + bb[h * N + n];
                    qpre[n] = cn[n] * cu[g * N + n] + cb[h * N + n];
                }
                double[] k = rotate(kpre, th), q = rotate(qpre, th);
                if (keep) {
                    tp.sArg[t][h] = sArg;
                    tp.delta[t][h] = delta;
                    tp.a[t][h] = A;
                    tp.clamped[t][h] = clamped;
                    tp.sig[t][h] = sig;
                    tp.alpha[t][h] = alpha;
                    tp.beta[t][h] = beta;
                    tp.gamma[t][h] = gamma;
                    tp.kpre[t][h] = kpre;
                    tp.qpre[t][h] = qpre;
                    tp.k[t][h] = k;
                    tp.q[t][h] = q;
                    tp.th[t][h] = th;
                }
                int sS = so + h * P * N, sK = so + kOff + h * N, sV = so + vOff + h * P;
                for (int pp = 0; pp < P; pp++) {
                    double xv = pr[xCol + h * P + pp], vp = st[sV + pp], acc = 0;
                    for (int n = 0; n < N; n++) {
                        int i = sS + pp * N + n;
                        st[i] = alpha * st[i] + beta * vp * st[sK + n] + gamma * xv * k[n];
                        acc += st[i] * q[n];
                    }
                    y[t][h * P + pp] = acc + dsk[h] * xv;
                }
                System.arraycopy(k, 0, st, sK, N);
                for (int pp = 0; pp < P; pp++) st[sV + pp] = pr[xCol + h * P + pp];
                if (keep) {
                    tp.S[t + 1][h] = new double[P * N];
                    System.arraycopy(st, sS, tp.S[t + 1][h], 0, P * N);
                }
            }
        }
        if (quadratic) y = quadraticMixer(tp, dsk, T);

        for (int t = 0; t < T; t++) {
            double[] g = new double[E];
            for (int h = 0; h < H; h++) {
                double rg = 1;
                if (gateNorm) {
                    double ss = 0;
                    for (int pp = 0; pp < P; pp++) ss += y[t][h * P + pp] * y[t][h * P + pp];
                    rg = 1 / Math.sqrt(ss / P + INNER_EPS);
                    if (keep) tp.rhoG[t][h] = rg;
                }
                for (int pp = 0; pp < P; pp++) {
                    int e = h * P + pp;
                    double sz = silu(proj[t][zCol + e]);
                    g[e] = gateNorm ? wg[e] * y[t][e] * rg * sz : y[t][e] * sz;
                }
            }
            if (keep) {
                tp.y[t] = y[t];
                tp.g[t] = g;
            }
            double[] o = matvec(wout, dModel, E, g);
            for (int i = 0; i < dModel; i++) r[t][i] += o[i];
        }
        return tp;
    }

    /**
     * The mixer output y [T][E] from the tape's per-step quantities in the quadratic form of the note's §3:
     * y_t = Σ_{s<t} (q_t·k_s)·scale_s·e^{c_t−c_s}·x_s + γ_t·(q_t·k_t)·x_t + D·x_t + e^{c_t}·S̃₀·q_t, with
     * c_t = Σ_{r≤t} A_r·Δ_r, scale_s = γ_s + Δ_{s+1}(1−σ_{s+1}) and S̃₀ = S₋₁ + Δ₀(1−σ₀)·v_prev ⊗ k_prev.
     * (scale_s is only used for s < t ≤ T−1, so the "0 past the end" case never arises.)
     */
    private double[][] quadraticMixer(Tape tp, double[] dsk, int T) {
        final int H = nheads, P = headdim, N = dState;
        double[][] y = new double[T][dInner];
        for (int h = 0; h < H; h++) {
            double[] c = new double[T];
            double acc = 0;
            for (int t = 0; t < T; t++) c[t] = acc += tp.a[t][h] * tp.delta[t][h];
            double[] s0 = tp.S[0][h].clone();
            double f0 = tp.delta[0][h] * (1 - tp.sig[0][h]);
            for (int pp = 0; pp < P; pp++)
                for (int n = 0; n < N; n++) s0[pp * N + n] += f0 * tp.v0[h][pp] * tp.k0[h][n];
            for (int t = 0; t < T; t++) {
                double[] q = tp.q[t][h];
                double[] yt = new double[P];
                double e0 = Math.exp(c[t]);
                for (int pp = 0; pp < P; pp++) {
                    double v = 0;
                    for (int n = 0; n < N; n++) v += s0[pp * N + n] * q[n];
                    yt[pp] = e0 * v;
                }
                for (int s = 0; s <= t; s++) {
                    double qk = dot(q, tp.k[s][h]);
                    double coef = s < t
                            ? qk * (tp.gamma[s][h] + tp.delta[s + 1][h] * (1 - tp.sig[s + 1][h])) * Math.exp(c[t] - c[s])
                            : qk * tp.gamma[t][h];
                    for (int pp = 0; pp < P; pp++) yt[pp] += coef * tp.proj[s][xCol + h * P + pp];
                }
                for (int pp = 0; pp < P; pp++) y[t][h * P + pp] = yt[pp] + dsk[h] * tp.proj[t][xCol + h * P + pp];
            }
        }
        return y;
    }

    /** Pairs (2a, 2a+1) rotated by θ[a]; the dims ≥ 2·nangles pass through. */
    private static double[] rotate(double[] v, double[] th) {
        double[] o = v.clone();
        for (int a = 0; a < th.length; a++) {
            double c = Math.cos(th[a]), s = Math.sin(th[a]);
            o[2 * a] = c * v[2 * a] - s * v[2 * a + 1];
            o[2 * a + 1] = s * v[2 * a] + c * v[2 * a + 1];
        }
        return o;
    }

    // ---------------------------------------------------------------- backward

    /** The gradients of L = Σ dOut ⊙ out: every parameter by name, the input (float models), and the outputs. */
    record Gradients(Map<String, double[]> params, double[] input, double[] out) {}

    /**
     * Analytic backpropagation through time over [B, T] from {@code start} (not modified; it receives no
     * gradient), for the loss L = Σ dOut ⊙ out with dOut [B, T, outputWidth].
     */
    Gradients backward(double[] x, int[] ids, int B, int T, double[][] start, double[] dOut) {
        Map<String, double[]> grads = new LinkedHashMap<>();
        for (Map.Entry<String, double[]> e : w.entrySet()) grads.put(e.getKey(), new double[e.getValue().length]);
        int inW = inputWidth(), outW = outputWidth();
        double[] dx = vocab > 0 ? null : new double[B * T * inW];
        double[] out = new double[B * T * outW];
        for (int b = 0; b < B; b++) {
            double[] st = start[b].clone();
            Run run = runRow(x, ids, b, T, st, true, false);
            double[][] dOutRow = new double[T][outW];
            for (int t = 0; t < T; t++) {
                System.arraycopy(dOut, (b * T + t) * outW, dOutRow[t], 0, outW);
                System.arraycopy(run.out[t], 0, out, (b * T + t) * outW, outW);
            }
            double[][] din = backwardRow(run, T, dOutRow, grads);
            if (dx != null) for (int t = 0; t < T; t++) System.arraycopy(din[t], 0, dx, (b * T + t) * inW, inW);
        }
        return new Gradients(grads, dx, out);
    }

    private double[][] backwardRow(Run run, int T, double[][] dOut, Map<String, double[]> grads) {
        final int D = dModel;
        double[][] dr = new double[T][];
        // Output stage: logits = head · hid (language models), hid = norm_f(r).
        double[] wf = w.get("backbone.norm_f.weight"), dwf = grads.get("backbone.norm_f.weight");
        for (int t = 0; t < T; t++) {
            double[] dhid;
            if (vocab > 0) {
                double[] hw = head(), dhw = grads.get(tied ? "backbone.embeddings.weight" : "lm_head.weight");
                dhid = new double[D];
                for (int v = 0; v < vocab; v++) {
                    double d = dOut[t][v];
                    if (d == 0) continue;
                    for (int i = 0; i < D; i++) {
                        dhw[v * D + i] += d * run.hid[t][i];
                        dhid[i] += d * hw[v * D + i];
                    }
                }
            } else {
                dhid = dOut[t];
            }
            dr[t] = new double[D];
            rmsNormBackward(run.rFinal[t], run.rhoF[t], wf, dhid, dr[t], dwf);
        }
        for (int l = layers - 1; l >= 0; l--) layerBackward(l, run.tapes[l], T, dr, grads);
        // Input stage.
        if (vocab > 0) {
            double[] de = grads.get("backbone.embeddings.weight");
            for (int t = 0; t < T; t++)
                for (int i = 0; i < D; i++) de[run.ids[t] * D + i] += dr[t][i];
            return null;
        }
        if (inputDim == 0) return dr;
        double[] wi = w.get("input_proj.weight"), dwi = grads.get("input_proj.weight"), dbi = grads.get("input_proj.bias");
        double[][] dx = new double[T][inputDim];
        for (int t = 0; t < T; t++)
            for (int i = 0; i < D; i++) {
                double d = dr[t][i];
                dbi[i] += d;
                for (int j = 0; j < inputDim; j++) {
                    dwi[i * inputDim + j] += d * run.in[t][j];
                    dx[t][j] += d * wi[i * inputDim + j];
                }
            }
        return dx;
    }

    /** y = w ⊙ x·ρ: dx += ρ·(w⊙dy − u·mean(w⊙dy⊙u)) with u = ρ·x; dw += dy ⊙ u. */
    private static void rmsNormBackward(double[] x, double rho, double[] wt, double[] dy, double[] dx, double[] dw) {
        int n = x.length;
        double m = 0;
        for (int i = 0; i < n; i++) m += wt[i] * dy[i] * x[i] * rho;
        m /= n;
        for (int i = 0; i < n; i++) {
            double u = x[i] * rho;
            dw[i] += dy[i] * u;
            dx[i] += rho * (wt[i] * dy[i] - u * m);
        }
    }

    /** One block's backward: dr [T][D] holds ∂L/∂(residual after the block) and becomes ∂L/∂(residual before). */
    private void layerBackward(int l, Tape tp, int T, double[][] dr, Map<String, double[]> grads) {
        String p = "backbone.layers." + l + ".";
        final int H = nheads, P = headdim, N = dState, NA = nangles, G = ngroups, E = dInner, D = dModel, W = proj;
        final int hpg = H / G;
        double[] wn = w.get(p + "norm.weight"), win = w.get(p + "mixer.in_proj.weight"), wout = w.get(p + "mixer.out_proj.weight");
        double[] bn = w.get(p + "mixer.B_norm.weight"), cn = w.get(p + "mixer.C_norm.weight"), dsk = w.get(p + "mixer.D");
        double[] wg = gateNorm ? w.get(p + "mixer.norm.weight") : null;
        double[] dwn = grads.get(p + "norm.weight"), dwin = grads.get(p + "mixer.in_proj.weight");
        double[] dwout = grads.get(p + "mixer.out_proj.weight"), ddtb = grads.get(p + "mixer.dt_bias");
        double[] dbb = grads.get(p + "mixer.B_bias"), dcb = grads.get(p + "mixer.C_bias");
        double[] dbn = grads.get(p + "mixer.B_norm.weight"), dcn = grads.get(p + "mixer.C_norm.weight");
        double[] ddsk = grads.get(p + "mixer.D"), dwg = gateNorm ? grads.get(p + "mixer.norm.weight") : null;

        // out_proj: dg = W_outᵀ·dr, dW_out += dr ⊗ g.
        double[][] dproj = new double[T][W];
        double[][] dy = new double[T][E];
        for (int t = 0; t < T; t++) {
            double[] dg = new double[E];
            for (int i = 0; i < D; i++) {
                double d = dr[t][i];
                for (int e = 0; e < E; e++) {
                    dwout[i * E + e] += d * tp.g[t][e];
                    dg[e] += d * wout[i * E + e];
                }
            }
            // The gate.
            for (int h = 0; h < H; h++) {
                double m = 0;
                double rg = gateNorm ? tp.rhoG[t][h] : 1;
                for (int pp = 0; pp < P; pp++) {
                    int e = h * P + pp;
                    double z = tp.proj[t][zCol + e], s = sigmoid(z), sz = z * s, dsz = s * (1 + z * (1 - s));
                    if (gateNorm) {
                        double yh = rg * tp.y[t][e];
                        dproj[t][zCol + e] = dg[e] * yh * wg[e] * dsz;
                        dwg[e] += dg[e] * sz * yh;
                        double ee = dg[e] * sz;
                        dy[t][e] = ee;  // w⊙e finished below
                        m += wg[e] * ee * yh;
                    } else {
                        dproj[t][zCol + e] = dg[e] * tp.y[t][e] * dsz;
                        dy[t][e] = dg[e] * sz;
                    }
                }
                if (gateNorm) {
                    m /= P;
                    for (int pp = 0; pp < P; pp++) {
                        int e = h * P + pp;
                        dy[t][e] = rg * (wg[e] * dy[t][e] - rg * tp.y[t][e] * m);
                    }
                }
            }
        }

        // The recurrence, per head in reverse time; then RoPE, angles, the per-head scalars.
        double[][] dBhat = new double[T][G * N], dChat = new double[T][G * N];
        for (int h = 0; h < H; h++) {
            int g = h / hpg;
            double[] Gm = new double[P * N], kappa = new double[N];
            double[] dAlpha = new double[T], dBeta = new double[T], dGamma = new double[T];
            double[][] dth = new double[T][NA];
            for (int t = T - 1; t >= 0; t--) {
                double[] St = tp.S[t + 1][h], Sp = tp.S[t][h], q = tp.q[t][h], k = tp.k[t][h];
                double[] kp = t > 0 ? tp.k[t - 1][h] : tp.k0[h];
                double[] vp = new double[P], xv = new double[P], dyv = new double[P];
                for (int pp = 0; pp < P; pp++) {
                    vp[pp] = t > 0 ? tp.proj[t - 1][xCol + h * P + pp] : tp.v0[h][pp];
                    xv[pp] = tp.proj[t][xCol + h * P + pp];
                    dyv[pp] = dy[t][h * P + pp];
                }
                double alpha = tp.alpha[t][h], beta = tp.beta[t][h], gamma = tp.gamma[t][h];
                double[] dq = new double[N];
                for (int pp = 0; pp < P; pp++)
                    for (int n = 0; n < N; n++) {
                        Gm[pp * N + n] += dyv[pp] * q[n];
                        dq[n] += dyv[pp] * St[pp * N + n];
                    }
                double dD = 0;
                for (int pp = 0; pp < P; pp++) dD += dyv[pp] * xv[pp];
                ddsk[h] += dD;
                double[] dk = kappa.clone();
                double dg = 0, db = 0, da = 0;
                double[] kappaNew = new double[N];
                for (int pp = 0; pp < P; pp++) {
                    double gk = 0, gkp = 0;
                    for (int n = 0; n < N; n++) {
                        double gv = Gm[pp * N + n];
                        gk += gv * k[n];
                        gkp += gv * kp[n];
                        dk[n] += gamma * gv * xv[pp];
                        kappaNew[n] += beta * gv * vp[pp];
                        da += gv * Sp[pp * N + n];
                    }
                    dg += xv[pp] * gk;
                    db += vp[pp] * gkp;
                    dproj[t][xCol + h * P + pp] += dsk[h] * dyv[pp] + gamma * gk;
                    if (t > 0) dproj[t - 1][xCol + h * P + pp] += beta * gkp;
                }
                kappa = kappaNew;  // reaches k_{t−1} (for t = 0: the incoming state, dropped)
                dAlpha[t] = da;
                dBeta[t] = db;
                dGamma[t] = dg;
                for (int i = 0; i < P * N; i++) Gm[i] *= alpha;
                // RoPE backward.
                double[] dkp = dk.clone(), dqp = dq.clone();
                double[] kpre = tp.kpre[t][h], qpre = tp.qpre[t][h];
                for (int a = 0; a < NA; a++) {
                    double th = tp.th[t][h][a], c = Math.cos(th), s = Math.sin(th);
                    dkp[2 * a] = c * dk[2 * a] + s * dk[2 * a + 1];
                    dkp[2 * a + 1] = -s * dk[2 * a] + c * dk[2 * a + 1];
                    dqp[2 * a] = c * dq[2 * a] + s * dq[2 * a + 1];
                    dqp[2 * a + 1] = -s * dq[2 * a] + c * dq[2 * a + 1];
                    dth[t][a] = dk[2 * a] * (-s * kpre[2 * a] - c * kpre[2 * a + 1])
                            + dk[2 * a + 1] * (c * kpre[2 * a] - s * kpre[2 * a + 1])
                            + dq[2 * a] * (-s * qpre[2 * a] - c * qpre[2 * a + 1])
                            + dq[2 * a + 1] * (c * qpre[2 * a] - s * qpre[2 * a + 1]);
                }
                for (int n = 0; n < N; n++) {
                    dbb[h * N + n] += dkp[n];
                    dcb[h * N + n] += dqp[n];
                    dBhat[t][g * N + n] += dkp[n];
                    dChat[t][g * N + n] += dqp[n];
                }
            }
            // Angles (θ_t depends on every increment up to t; the wrap has zero derivative), then the scalars.
            double[] phi = new double[NA];
            for (int t = T - 1; t >= 0; t--) {
                double delta = tp.delta[t][h], A = tp.a[t][h], sig = tp.sig[t][h], alpha = tp.alpha[t][h];
                double dDelta = 0;
                for (int a = 0; a < NA; a++) {
                    phi[a] += dth[t][a];
                    double th = tp.tanhAng[t][a];
                    dproj[t][angCol + a] += phi[a] * Math.PI * delta * (1 - th * th);
                    dDelta += phi[a] * Math.PI * th;
                }
                double dAD = dAlpha[t] * alpha + dBeta[t] * tp.beta[t][h];
                dDelta += dAD * A + dBeta[t] * alpha * (1 - sig) + dGamma[t] * sig;
                double dSig = (dGamma[t] - dBeta[t] * alpha) * delta;
                dproj[t][trapCol + h] = dSig * sig * (1 - sig);
                double dA = dAD * delta;
                dproj[t][aCol + h] = tp.clamped[t][h] ? 0 : -dA * heavyTailDerivative(tp.proj[t][aCol + h]);
                double dsp = dDelta * sigmoid(tp.sArg[t][h]);
                dproj[t][dtCol + h] = dsp;
                ddtb[h] += dsp;
            }
        }
        // BCNorm backward (weights shared across groups).
        for (int t = 0; t < T; t++)
            for (int g = 0; g < G; g++) {
                bcNormBackward(tp.bu[t], tp.rhoB[t][g], g * N, N, bn, dBhat[t], dbn, dproj[t], bCol + g * N);
                bcNormBackward(tp.cu[t], tp.rhoC[t][g], g * N, N, cn, dChat[t], dcn, dproj[t], cCol + g * N);
            }

        // in_proj and the block norm; the residual passes dr through.
        for (int t = 0; t < T; t++) {
            double[] dn = new double[D];
            for (int j = 0; j < W; j++) {
                double d = dproj[t][j];
                if (d == 0) continue;
                for (int i = 0; i < D; i++) {
                    dwin[j * D + i] += d * tp.nrm[t][i];
                    dn[i] += d * win[j * D + i];
                }
            }
            rmsNormBackward(tp.rin[t], tp.rho[t], wn, dn, dr[t], dwn);
        }
    }

    /** ŷ = w ⊙ u with u = ρ·raw: dw += dŷ ⊙ u, draw = ρ·(w⊙dŷ − u·mean(w⊙dŷ⊙u)). */
    private static void bcNormBackward(double[] u, double rho, int off, int n, double[] wt, double[] dyAll, double[] dw,
                                       double[] dproj, int col) {
        double m = 0;
        for (int i = 0; i < n; i++) m += wt[i] * dyAll[off + i] * u[off + i];
        m /= n;
        for (int i = 0; i < n; i++) {
            dw[i] += dyAll[off + i] * u[off + i];
            dproj[col + i] = rho * (wt[i] * dyAll[off + i] - u[off + i] * m);
        }
    }

    // ---------------------------------------------------------------- weights

    /**
     * Fresh random weights in a working regime that exercises every term: norms and D in [0.5, 1.5], B/C
     * biases in ±1.5, Δ = softplus(dt_bias) between about 0.01 and 1 (so angle increments π·tanh·Δ reach ±π
     * and the angles wrap), products uniform within their initialisation bound.
     */
    static void randomize(MambaModel model, Random rng) {
        for (String name : model.parameterNames()) {
            float[] v = model.getParameter(name);
            if (name.endsWith("norm.weight") || name.endsWith("norm_f.weight") || name.endsWith(".D")) {
                for (int i = 0; i < v.length; i++) v[i] = (float) (0.5 + rng.nextDouble());
            } else if (name.endsWith("dt_bias")) {
                for (int i = 0; i < v.length; i++) v[i] = (float) (-4.6 + 5.1 * rng.nextDouble());
            } else if (name.endsWith("B_bias") || name.endsWith("C_bias")) {
                v = TestUtil.random(rng, v.length, 1.5);
            } else {
                double bound = 0;
                for (float f : v) bound = Math.max(bound, Math.abs(f));
                if (bound == 0 || name.startsWith("backbone.embeddings")) bound = Math.max(bound, 0.5);
                if (bound == 0) bound = 0.1;
                v = TestUtil.random(rng, v.length, bound);
            }
            model.setParameter(name, v);
        }
    }

    // ---------------------------------------------------------------- helpers

    /** m [rows, cols] · v. */
    static double[] matvec(double[] m, int rows, int cols, double[] v) {
        double[] out = new double[rows];
        for (int i = 0; i < rows; i++) {
            double s = 0;
            for (int j = 0; j < cols; j++) s += m[i * cols + j] * v[j];
            out[i] = s;
        }
        return out;
    }

    static double dot(double[] a, double[] b) {
        double s = 0;
        for (int i = 0; i < a.length; i++) s += a[i] * b[i];
        return s;
    }

    /** 1 / sqrt(mean(x²) + eps). */
    static double rmsScale(double[] x, double eps) {
        return rmsScaleSlice(x, 0, x.length, eps);
    }

    static double rmsScaleSlice(double[] x, int off, int n, double eps) {
        double ss = 0;
        for (int i = 0; i < n; i++) ss += x[off + i] * x[off + i];
        return 1 / Math.sqrt(ss / n + eps);
    }

    static double sigmoid(double x) {
        return x >= 0 ? 1 / (1 + Math.exp(-x)) : Math.exp(x) / (1 + Math.exp(x));
    }

    static double silu(double x) {
        return x * sigmoid(x);
    }

    static double softplus(double x) {
        return x > 20 ? x : Math.log1p(Math.exp(x));
    }

    /** ht(u) = 1 + u (u ≥ 0), 1 / (1 − u) (u < 0). */
    static double heavyTail(double u) {
        return u >= 0 ? 1 + u : 1 / (1 - u);
    }

    static double heavyTailDerivative(double u) {
        return u >= 0 ? 1 : 1 / ((1 - u) * (1 - u));
    }

    static double[] toDouble(float[] f) {
        double[] d = new double[f.length];
        for (int i = 0; i < f.length; i++) d[i] = f[i];
        return d;
    }

    static float[] toFloat(double[] d) {
        float[] f = new float[d.length];
        for (int i = 0; i < d.length; i++) f[i] = (float) d[i];
        return f;
    }
}
