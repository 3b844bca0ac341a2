package org.mamba4j;

import java.util.HashMap;
import java.util.Map;

/**
 * An independent double-precision Mamba-1 step, written from the reference note (state-spaces/mamba
 * {@code Mamba.step}) with no code shared with libmamba: plain loops, libm functions, no fusion.
 * It reads the weights from a {@link MambaModel} once and keeps its own state per row.
 */
final class Mamba1Reference {
    private final int dModel, dInner, dState, dConv, dtRank, layers, inputDim;
    private final double eps;
    private final Map<String, double[]> w = new HashMap<>();
    private final int batch;
    private final double[][][][] conv; // [row][layer][channel][dConv-1], oldest first
    private final double[][][][] ssm;  // [row][layer][channel][dState]

    Mamba1Reference(MambaModel model, int batch) {
        Mamba1Config c = (Mamba1Config) model.config();  // the reference implements Mamba-1 only
        dModel = c.dModel();
        dInner = c.dInner();
        dState = c.dState();
        dConv = c.dConv();
        dtRank = c.dtRank();
        layers = c.layers();
        inputDim = model.inputDim();
        eps = c.normEps();
        for (String name : model.parameterNames()) {
            float[] f = model.getParameter(name);
            double[] d = new double[f.length];
            for (int i = 0; i < f.length; i++) d[i] = f[i];
            w.put(name, d);
        }
        this.batch = batch;
        conv = new double[batch][layers][dInner][Math.max(0, dConv - 1)];
        ssm = new double[batch][layers][dInner][dState];
    }

    /** One step for all rows: x [batch · inputWidth] → y [batch · dModel]. */
    double[] step(float[] x) {
        int inW = inputDim > 0 ? inputDim : dModel;
        double[] y = new double[batch * dModel];
        for (int b = 0; b < batch; b++) {
            double[] in = new double[inW];
            for (int i = 0; i < inW; i++) in[i] = x[b * inW + i];
            double[] out = stepRow(b, in);
            System.arraycopy(out, 0, y, b * dModel, dModel);
        }
        return y;
    }

    private double[] stepRow(int b, double[] in) {
        double[] r;
        if (inputDim > 0) {
            r = matvec(w.get("input_proj.weight"), dModel, inputDim, in);
            double[] bias = w.get("input_proj.bias");
            for (int i = 0; i < dModel; i++) r[i] += bias[i];
        } else {
            r = in.clone();
        }
        for (int l = 0; l < layers; l++) {
            String p = "backbone.layers." + l + ".";
            double[] n = rmsNorm(r, w.get(p + "norm.weight"));
            double[] xz = matvec(w.get(p + "mixer.in_proj.weight"), 2 * dInner, dModel, n);
            double[] cw = w.get(p + "mixer.conv1d.weight"), cb = w.get(p + "mixer.conv1d.bias");
            double[] u = new double[dInner];
            for (int d = 0; d < dInner; d++) {
                double[] hist = conv[b][l][d];
                double acc = cb[d] + cw[d * dConv + dConv - 1] * xz[d];
                for (int k = 0; k < dConv - 1; k++) acc += cw[d * dConv + k] * hist[k];
                if (dConv > 1) {  // shift left, append the newest input
                    System.arraycopy(hist, 1, hist, 0, dConv - 2);
                    hist[dConv - 2] = xz[d];
                }
                u[d] = silu(acc);
            }
            double[] xdbl = matvec(w.get(p + "mixer.x_proj.weight"), dtRank + 2 * dState, dInner, u);
            double[] delta = new double[dtRank];
            System.arraycopy(xdbl, 0, delta, 0, dtRank);
            double[] dt = matvec(w.get(p + "mixer.dt_proj.weight"), dInner, dtRank, delta);
            double[] dtb = w.get(p + "mixer.dt_proj.bias"), aLog = w.get(p + "mixer.A_log"), dSkip = w.get(p + "mixer.D");
            double[] g = new double[dInner];
            for (int d = 0; d < dInner; d++) {
                double step = softplus(dt[d] + dtb[d]);
                double[] h = ssm[b][l][d];
                double yv = 0;
                for (int s = 0; s < dState; s++) {
                    double a = -Math.exp(aLog[d * dState + s]);
                    h[s] = Math.exp(step * a) * h[s] + step * xdbl[dtRank + s] * u[d];
                    yv += h[s] * xdbl[dtRank + dState + s];
                }
                yv += dSkip[d] * u[d];
                g[d] = yv * silu(xz[dInner + d]);
            }
            double[] o = matvec(w.get(p + "mixer.out_proj.weight"), dModel, dInner, g);
            for (int i = 0; i < dModel; i++) r[i] += o[i];
        }
        return rmsNorm(r, w.get("backbone.norm_f.weight"));
    }

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

    private double[] rmsNorm(double[] x, double[] weight) {
        return rmsNorm(x, weight, eps);
    }

    /** weight ⊙ x / sqrt(mean(x²) + eps). */
    static double[] rmsNorm(double[] x, double[] weight, double eps) {
        double ss = 0;
        for (double v : x) ss += v * v;
        double scale = 1 / Math.sqrt(ss / x.length + eps);
        double[] out = new double[x.length];
        for (int i = 0; i < x.length; i++) out[i] = weight[i] * x[i] * scale;
        return out;
    }

    static double silu(double x) {
        return x / (1 + Math.exp(-x));
    }

    static double softplus(double x) {
        return x > 20 ? x : Math.log1p(Math.exp(x));
    }
}
