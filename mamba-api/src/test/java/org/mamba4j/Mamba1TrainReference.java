package org.mamba4j;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * An independent double-precision Mamba-1 sequence forward for gradient checks, written from the
 * reference note (§3) with no code shared with libmamba: plain loops and libm. Weights are held as
 * mutable double arrays by name so a test can perturb single elements; an optional head
 * (lm_head.weight [vocab, dModel], lm_head.bias [vocab]) turns outputs into logits.
 */
final class Mamba1TrainReference {
    final int dModel, dInner, dState, dConv, dtRank, layers, inputDim, inW;
    final double eps;
    /** Weights by name (the model's, then the head's); perturb them in place. */
    final Map<String, double[]> w = new LinkedHashMap<>();
    int vocab;

    /** A recurrent state: per row and layer the conv history [E][K-1] (oldest first) and h [E][N]. */
    static final class State {
        final double[][][][] conv, ssm;

        State(int batch, int layers, int dInner, int dConv, int dState) {
            conv = new double[batch][layers][dInner][Math.max(0, dConv - 1)];
            ssm = new double[batch][layers][dInner][dState];
        }
    }

    Mamba1TrainReference(MambaModel model) {
        Mamba1Config c = (Mamba1Config) model.config();  // the reference implements Mamba-1 only
        dModel = c.dModel();
        dInner = c.dInner();
        dState = c.dState();
        dConv = c.dConv();
        dtRank = c.dtRank();
        layers = c.layers();
        inputDim = model.inputDim();
        inW = inputDim > 0 ? inputDim : dModel;
        eps = c.normEps();
        for (String name : model.parameterNames()) w.put(name, toDouble(model.getParameter(name)));
    }

    void setHead(LinearHead head) {
        vocab = head.vocab();
        w.put(LinearHead.WEIGHT, toDouble(head.weight()));
        w.put(LinearHead.BIAS, toDouble(head.bias()));
    }

    State zeroState(int batch) {
        return new State(batch, layers, dInner, dConv, dState);
    }

    State copy(State s) {
        State c = zeroState(s.conv.length);
        for (int b = 0; b < s.conv.length; b++)
            for (int l = 0; l < layers; l++)
                for (int d = 0; d < dInner; d++) {
                    c.conv[b][l][d] = s.conv[b][l][d].clone();
                    c.ssm[b][l][d] = s.ssm[b][l][d].clone();
                }
        return c;
    }

    /** Every position's output [B, T, dModel] for x [B, T, inW], advancing `state` (modified in place). */
    double[] forward(double[] x, int B, int T, State state) {
        double[] out = new double[B * T * dModel];
        for (int b = 0; b < B; b++) {
            // residual stream of every step of this row
            double[][] r = new double[T][];
            for (int t = 0; t < T; t++) {
                double[] in = new double[inW];
                System.arraycopy(x, (b * T + t) * inW, in, 0, inW);
                if (inputDim > 0) {
                    r[t] = Mamba1Reference.matvec(w.get("input_proj.weight"), dModel, inputDim, in);
                    double[] bias = w.get("input_proj.bias");
                    for (int i = 0; i < dModel; i++) r[t][i] += bias[i];
                } else {
                    r[t] = in;
                }
            }
            for (int l = 0; l < layers; l++) {
                String p = "backbone.layers." + l + ".";
                double[] cw = w.get(p + "mixer.conv1d.weight"), cb = w.get(p + "mixer.conv1d.bias");
                double[] dtb = w.get(p + "mixer.dt_proj.bias"), aLog = w.get(p + "mixer.A_log"), dSkip = w.get(p + "mixer.D");
                double[][] hist = state.conv[b][l], h = state.ssm[b][l];
                for (int t = 0; t < T; t++) {
                    double[] n = rmsNorm(r[t], w.get(p + "norm.weight"));
                    double[] xz = Mamba1Reference.matvec(w.get(p + "mixer.in_proj.weight"), 2 * dInner, dModel, n);
                    double[] u = new double[dInner];
                    for (int d = 0; d < dInner; d++) {  // causal depthwise conv over history + current input
                        double acc = cb[d] + cw[d * dConv + dConv - 1] * xz[d];
                        for (int k = 0; k < dConv - 1; k++) acc += cw[d * dConv + k] * hist[d][k];
                        if (dConv > 1) {
                            System.arraycopy(hist[d], 1, hist[d], 0, dConv - 2);
                            hist[d][dConv - 2] = xz[d];
                        }
                        u[d] = Mamba1Reference.silu(acc);
                    }
                    double[] xdbl = Mamba1Reference.matvec(w.get(p + "mixer.x_proj.weight"), dtRank + 2 * dState, dInner, u);
                    double[] delta = new double[dtRank];
                    System.arraycopy(xdbl, 0, delta, 0, dtRank);
                    double[] dt = Mamba1Reference.matvec(w.get(p + "mixer.dt_proj.weight"), dInner, dtRank, delta);
                    double[] g = new double[dInner];
                    for (int d = 0; d < dInner; d++) {
                        double step = Mamba1Reference.softplus(dt[d] + dtb[d]);
                        double y = 0;
                        for (int s = 0; s < dState; s++) {
                            double a = -Math.exp(aLog[d * dState + s]);
                            h[d][s] = Math.exp(step * a) * h[d][s] + step * xdbl[dtRank + s] * u[d];
                            y += h[d][s] * xdbl[dtRank + dState + s];
                        }
                        y += dSkip[d] * u[d];
                        g[d] = y * Mamba1Reference.silu(xz[dInner + d]);
                    }
                    double[] o = Mamba1Reference.matvec(w.get(p + "mixer.out_proj.weight"), dModel, dInner, g);
                    for (int i = 0; i < dModel; i++) r[t][i] += o[i];
                }
            }
            for (int t = 0; t < T; t++)
                System.arraycopy(rmsNorm(r[t], w.get("backbone.norm_f.weight")), 0, out, (b * T + t) * dModel, dModel);
        }
        return out;
    }

    /** Mean softmax cross-entropy of the head's logits over positions whose target is not ignoreIndex. */
    double crossEntropy(double[] out, int rows, int[] targets, int ignoreIndex) {
        double[] hw = w.get(LinearHead.WEIGHT), hb = w.get(LinearHead.BIAS);
        double loss = 0;
        int counted = 0;
        for (int r = 0; r < rows; r++) {
            if (targets[r] == ignoreIndex) continue;
            double[] hid = new double[dModel];
            System.arraycopy(out, r * dModel, hid, 0, dModel);
            double[] logits = Mamba1Reference.matvec(hw, vocab, dModel, hid);
            double max = Double.NEGATIVE_INFINITY;
            for (int k = 0; k < vocab; k++) max = Math.max(max, logits[k] += hb[k]);
            double sum = 0;
            for (int k = 0; k < vocab; k++) sum += Math.exp(logits[k] - max);
            loss += Math.log(sum) + max - logits[targets[r]];
            counted++;
        }
        return loss / counted;
    }

    static double[] toDouble(float[] f) {
        double[] d = new double[f.length];
        for (int i = 0; i < f.length; i++) d[i] = f[i];
        return d;
    }

    private double[] rmsNorm(double[] x, double[] weight) {
        return Mamba1Reference.rmsNorm(x, weight, eps);
    }
}
