// The selective scan on the CPU: the forward (inference and training, with the optional Δ projection) and
// the backward, all on the one recurrence of cpu_scan.h. Tasks are (batch row, channel block); partial sums
// over channel blocks and over rows are combined afterwards in a fixed order, so the results do not depend
// on the thread count.
#include "cpu_scan.h"

#include "core/errors.h"
#include "lowp.h"
#include "thread_pool.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace mamba::cpu {
namespace {

/** n values of one row: into f32 (when not null) or rounded into row r, columns d0 … of `r16`. */
void storeRow(const float* v, int n, float* f32, const Rounded16& r16, int64_t r, int d0) {
    if (f32) std::copy(v, v + n, f32);
    else narrowFromF32(v, r16.dtype == DTYPE_F16, static_cast<uint16_t*>(r16.data) + r * r16.ld + d0, n);
}


void validateScan(const char* op, int batch, int steps, int channels, int d_state) {
    // Messages are built only on failure: this runs on every decode step.
    if (batch < 0 || steps < 0 || channels < 0)
        fail(std::string(op) + ": batch, steps and channels must be >= 0 (got " + std::to_string(batch) + ", " +
             std::to_string(steps) + ", " + std::to_string(channels) + ")");
    if (d_state < 1 || d_state > 256)
        fail(std::string(op) + ": d_state = " + std::to_string(d_state) + " must be in [1, 256]");
}

/** A channel block's dt bias (ScanArgs::dt_bias), or zeros: dt + 0 is dt for softplus and its derivative. */
void blockBias(const float* dt_bias, int d0, int nd, float* out) {
    for (int j = 0; j < nd; ++j) out[j] = dt_bias ? dt_bias[d0 + j] : 0.f;
}

/**
 * The forward of one (batch row b, channel block d0..d0+nd) task over all steps. With checkpoints, the
 * block's state before steps 0, chunk, 2·chunk, … is stored for the backward.
 */
template <int FixedN, StateLayout L>
void scanTask(const ScanArgs& s, const ScanCheckpoints* ck, int b, int d0, int nd) {
    const int N = FixedN > 0 ? FixedN : s.d_state;
    const int T = s.steps, C = s.channels;
    float* hRow = s.h + b * s.h_stride + static_cast<int64_t>(d0) * N;  // this block's state, ScanArgs layout
    const int64_t slab = static_cast<int64_t>(N) * kChannelBlock;
    const float* a;
    float* cur;
    float* next;
    if constexpr (L == StateLayout::Lanes) {
        float* H = workerScratch(0, 2 * slab);  // two states, ping-pong
        float* At = workerScratch(1, slab);
        toLanes(s.a + static_cast<int64_t>(d0) * N, N, nd, At);
        toLanes(hRow, N, nd, H);
        a = At;
        cur = H;
        next = H + slab;
    } else {
        a = s.a + static_cast<int64_t>(d0) * N;
        cur = next = hRow;  // in place
    }
    float* ckpt = nullptr;
    int64_t ckptStep = 0;  // floats between consecutive checkpoints of a row
    if (ck) {
        const int chunks = (T + ck->chunk - 1) / ck->chunk;
        ckptStep = static_cast<int64_t>(C) * N;
        ckpt = ck->data + static_cast<int64_t>(b) * chunks * ckptStep + static_cast<int64_t>(d0) * N;
    }
    alignas(64) float delta[kChannelBlock], du[kChannelBlock], y[kChannelBlock], bias[kChannelBlock];
    blockBias(s.dt_bias, d0, nd, bias);
    for (int t = 0; t < T; ++t) {
        if (ckpt && t % ck->chunk == 0) {
            float* dst = ckpt + static_cast<int64_t>(t / ck->chunk) * ckptStep;
            if constexpr (L == StateLayout::Lanes)
                fromLanes(cur, N, nd, dst);
            else
                std::memcpy(dst, cur, static_cast<size_t>(nd) * N * sizeof(float));
        }
        const int64_t r = static_cast<int64_t>(b) * T + t;
        const float* dt = s.dt + r * C + d0;
        const float* u = s.u + r * C + d0;
        const float* z = s.z + r * s.ldz + d0;
        const float* Bt = s.bc + r * s.ldbc;
        const float* Ct = Bt + N;
#pragma omp simd
        for (int j = 0; j < nd; ++j) {
            delta[j] = softplus(dt[j] + bias[j]);
            du[j] = delta[j] * u[j];
        }
        ssmStep<FixedN, L>(N, nd, delta, du, a, Bt, cur, next, nullptr);
        ssmReadout<FixedN, L>(N, nd, next, Ct, u, s.d_skip + d0, y);
#pragma omp simd
        for (int j = 0; j < nd; ++j) y[j] = y[j] * silu(z[j]);
        storeRow(y, nd, s.out ? s.out + r * C + d0 : nullptr, s.out16, r, d0);
        std::swap(cur, next);  // ChannelMajor: both are hRow
    }
    if constexpr (L == StateLayout::Lanes) fromLanes(cur, N, nd, hRow);
}

template <StateLayout L>
void scanTaskFor(const ScanArgs& s, const ScanCheckpoints* ck, int b, int d0, int nd) {
    if (s.d_state == 16)
        scanTask<16, L>(s, ck, b, d0, nd);
    else
        scanTask<0, L>(s, ck, b, d0, nd);
}

/** The backward of one (batch row, channel block) task; see selectiveScanBackward for the outputs. */
template <int FixedN>
void scanBackwardTask(const ScanBackwardArgs& s, int b, int blk, float* pbc, float* pda, float* pdd, float* pdb) {
    const int N = FixedN > 0 ? FixedN : s.d_state;
    const int T = s.steps, C = s.channels, K = s.chunk;
    const int64_t R = static_cast<int64_t>(s.batch) * T;
    const int chunks = (T + K - 1) / K;
    const int64_t row_ckpt = static_cast<int64_t>(chunks) * C * N;
    const int d0 = blk * kChannelBlock;
    const int nd = std::min(kChannelBlock, C - d0);
    const int64_t row0 = static_cast<int64_t>(b) * T;

    // States laid out [n][j] (Lanes) so every inner loop runs over the block's channels in SIMD lanes; only
    // dB/dC need a sum over channels (one per n and step).
    const int64_t slab = static_cast<int64_t>(N) * kChannelBlock;  // one step's state of a channel block
    float* hs = workerScratch(1, static_cast<int64_t>(K + 1) * slab);  // h_{ta-1} .. h_{tb-1}
    float* abar = workerScratch(2, static_cast<int64_t>(K) * slab);    // Ā per step
    float* G = workerScratch(3, slab);   // ∂L/∂h carried backwards
    float* gA = workerScratch(4, slab);  // Σ_t G·Δ·Ā·h_{t-1} (× A at the end)
    float* At = workerScratch(5, slab);  // A in lanes
    alignas(64) float delta[kChannelBlock], du[kChannelBlock], dy[kChannelBlock], sGB[kChannelBlock];
    alignas(64) float sDelta[kChannelBlock], gD[kChannelBlock], yv[kChannelBlock], gDb[kChannelBlock];
    alignas(64) float ddt_row[kChannelBlock], dz_row[kChannelBlock];  // a step's ddt, dz before they are stored
    alignas(64) float bias[kChannelBlock];
    blockBias(s.dt_bias, d0, nd, bias);
    const float* Dskip = s.d_skip + d0;
    const float* ckpt = s.checkpoints + b * row_ckpt + static_cast<int64_t>(d0) * N;
    toLanes(s.a + static_cast<int64_t>(d0) * N, N, nd, At);

    // Chunks in reverse: recompute each chunk's states from its checkpoint, then walk it backwards. The carry
    // starts from ∂L/∂h_end when the caller carries the state on (zero otherwise: nothing reads h after the end).
    std::fill(G, G + slab, 0.f);
    if (s.dh_end) toLanes(s.dh_end + b * s.dh_stride + static_cast<int64_t>(d0) * N, N, nd, G);
    std::fill(gA, gA + slab, 0.f);
    std::fill(gD, gD + kChannelBlock, 0.f);
    std::fill(gDb, gDb + kChannelBlock, 0.f);
    for (int c = chunks - 1; c >= 0; --c) {
        const int ta = c * K, tb = std::min(T, ta + K);
        // The chunk's states from its checkpoint: the forward's recurrence (the same ssmStep), step by step.
        toLanes(ckpt + static_cast<int64_t>(c) * C * N, N, nd, hs);
        for (int t = ta; t < tb; ++t) {
            const int64_t r = row0 + t;
            const float* dt = s.dt + r * C + d0;
            const float* u = s.u + r * C + d0;
#pragma omp simd
            for (int j = 0; j < nd; ++j) {
                delta[j] = softplus(dt[j] + bias[j]);
                du[j] = delta[j] * u[j];
            }
            ssmStep<FixedN, StateLayout::Lanes>(N, nd, delta, du, At, s.bc + r * s.ldbc,
                                                hs + static_cast<int64_t>(t - ta) * slab,
                                                hs + static_cast<int64_t>(t - ta + 1) * slab,
                                                abar + static_cast<int64_t>(t - ta) * slab);
        }
        for (int t = tb - 1; t >= ta; --t) {
            const int64_t r = row0 + t;
            const float* dt = s.dt + r * C + d0;
            const float* u = s.u + r * C + d0;
            const float* z = s.z + r * s.ldz + d0;
            const float* dout = s.dout + r * C + d0;
            const float* Bt = s.bc + r * s.ldbc;
            const float* Ct = Bt + N;
            const float* hcur = hs + static_cast<int64_t>(t - ta + 1) * slab;
            const float* hprev = hs + static_cast<int64_t>(t - ta) * slab;
            const float* ab = abar + static_cast<int64_t>(t - ta) * slab;
            float* du_out = s.du + r * C + d0;
            float* dz = dz_row;
            float* pb = pbc + (static_cast<int64_t>(blk) * R + r) * 2 * N;  // this block's dB_t, dC_t

            // y = Σ_n h·C + D·u (the forward's readout); the gate out = y·SiLU(z).
#pragma omp simd
            for (int j = 0; j < nd; ++j) delta[j] = softplus(dt[j] + bias[j]);
            ssmReadout<FixedN, StateLayout::Lanes>(N, nd, hcur, Ct, u, Dskip, yv);
#pragma omp simd
            for (int j = 0; j < nd; ++j) {
                const float zj = z[j], sz = sigmoid(zj);
                dy[j] = dout[j] * (zj * sz);
                dz[j] = dout[j] * yv[j] * (sz * (1.f + zj * (1.f - sz)));
                gD[j] += dy[j] * u[j];
                du[j] = delta[j] * u[j];
                sGB[j] = 0.f;
                sDelta[j] = 0.f;
            }
            for (int n = 0; n < N; ++n) {
                const float bn = Bt[n], cn = Ct[n];
                const float* h = hcur + n * kChannelBlock;
                const float* hp = hprev + n * kChannelBlock;
                const float* e = ab + n * kChannelBlock;
                const float* an = At + n * kChannelBlock;
                float* g = G + n * kChannelBlock;
                float* ga = gA + n * kChannelBlock;
                float accB = 0.f, accC = 0.f;
#pragma omp simd reduction(+ : accB, accC)
                for (int j = 0; j < nd; ++j) {
                    const float gn = g[j] + dy[j] * cn;  // ∂L/∂h_t
                    accC += dy[j] * h[j];
                    accB += gn * du[j];
                    sGB[j] += gn * bn;
                    const float gah = gn * e[j] * hp[j];
                    sDelta[j] += gah * an[j] + gn * bn * u[j];
                    ga[j] += gah * delta[j];
                    g[j] = gn * e[j];  // carried to h_{t-1}
                }
                pb[n] = accB;
                pb[N + n] = accC;
            }
#pragma omp simd
            for (int j = 0; j < nd; ++j) {
                du_out[j] = Dskip[j] * dy[j] + delta[j] * sGB[j];
                const float x = dt[j] + bias[j], sp = x > 20.f ? 1.f : sigmoid(x);  // softplus'
                ddt_row[j] = sDelta[j] * sp;
                gDb[j] += ddt_row[j];
            }
            storeRow(ddt_row, nd, s.ddt ? s.ddt + r * C + d0 : nullptr, s.ddt16, r, d0);
            storeRow(dz_row, nd, s.dz ? s.dz + r * s.lddz + d0 : nullptr, s.dz16, r, d0);
        }
    }
    if (s.dh_start) fromLanes(G, N, nd, s.dh_start + b * s.dh_stride + static_cast<int64_t>(d0) * N);  // ∂L/∂h_{-1}
    float* pa = pda + (static_cast<int64_t>(b) * C + d0) * N;
    for (int j = 0; j < nd; ++j)
        for (int n = 0; n < N; ++n) pa[static_cast<int64_t>(j) * N + n] = gA[n * kChannelBlock + j];
    std::copy(gD, gD + nd, pdd + static_cast<int64_t>(b) * C + d0);
    std::copy(gDb, gDb + nd, pdb + static_cast<int64_t>(b) * C + d0);
}

}  // namespace

void CpuBackend::selectiveScan(const ScanArgs& s, const Gemm* dtProj, const ScanCheckpoints* checkpoints) {
    validateScan("selectiveScan", s.batch, s.steps, s.channels, s.d_state);
    checkScanOutputs(s);
    if (checkpoints && (checkpoints->chunk < 1 || checkpoints->data == nullptr))
        fail("selectiveScan: checkpoints need data and chunk >= 1 (chunk = " + std::to_string(checkpoints->chunk) + ")");
    if (dtProj) {
        const int64_t R = static_cast<int64_t>(s.batch) * s.steps;
        if (dtProj->kind != GemmKind::Forward || dtProj->c != s.dt || dtProj->ldc != s.channels || dtProj->rows != R ||
            dtProj->w.out != s.channels)
            fail("selectiveScan: dtProj must be a Forward product writing s.dt ([batch·steps, channels])");
        gemm(*dtProj);
    }
    const int blocks = (s.channels + kChannelBlock - 1) / kChannelBlock;
    const int64_t work = static_cast<int64_t>(s.batch) * s.steps * s.channels * s.d_state / 4;
    parallelFor(static_cast<int64_t>(s.batch) * blocks, work > kMinParallelWork ? 1 : 1 << 30,
                [&](int64_t t0, int64_t t1) {
        for (int64_t task = t0; task < t1; ++task) {
            const int b = static_cast<int>(task / blocks);
            const int d0 = static_cast<int>(task % blocks) * kChannelBlock;
            const int nd = std::min(kChannelBlock, s.channels - d0);
            if (checkpoints)
                scanTaskFor<StateLayout::Lanes>(s, checkpoints, b, d0, nd);
            else
                scanTaskFor<StateLayout::ChannelMajor>(s, nullptr, b, d0, nd);
        }
    });
}

void CpuBackend::selectiveScanBackward(const ScanBackwardArgs& s) {
    validateScan("selectiveScanBackward", s.batch, s.steps, s.channels, s.d_state);
    if (s.chunk < 1) fail("selectiveScanBackward: chunk = " + std::to_string(s.chunk) + " must be >= 1");
    checkScanBackwardOutputs(s);
    const int N = s.d_state, T = s.steps, C = s.channels;
    const int blocks = (C + kChannelBlock - 1) / kChannelBlock;
    const int64_t R = static_cast<int64_t>(s.batch) * T;
    // dB_t, dC_t sum over channels: one partial per channel block, added in block order afterwards.
    float* pbc = scratch(0, static_cast<int64_t>(blocks) * R * 2 * N);
    // dA, dD sum over rows: one partial per row, added in row order afterwards.
    float* pda = scratch(1, static_cast<int64_t>(s.batch) * C * N);
    float* pdd = scratch(2, static_cast<int64_t>(s.batch) * C);
    float* pdb = scratch(3, static_cast<int64_t>(s.batch) * C);  // Σ_t ddt per row (ddt_bias)
    const int64_t work = R * C * N / 2;
    parallelFor(static_cast<int64_t>(s.batch) * blocks, work > kMinParallelWork ? 1 : 1 << 30,
                [&](int64_t t0, int64_t t1) {
        for (int64_t task = t0; task < t1; ++task) {
            const int b = static_cast<int>(task / blocks), blk = static_cast<int>(task % blocks);
            if (N == 16)
                scanBackwardTask<16>(s, b, blk, pbc, pda, pdd, pdb);
            else
                scanBackwardTask<0>(s, b, blk, pbc, pda, pdd, pdb);
        }
    });
    // dB, dC: sum the channel blocks in block order.
    parallelFor(R, kMinParallelWork / std::max(1, blocks * 2 * N), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            float* out = s.dbc + r * s.lddbc;
            const float* p0 = pbc + r * 2 * N;
            std::copy(p0, p0 + 2 * N, out);
            for (int blk = 1; blk < blocks; ++blk) {
                const float* p = pbc + (static_cast<int64_t>(blk) * R + r) * 2 * N;
                for (int n = 0; n < 2 * N; ++n) out[n] += p[n];
            }
        }
    });
    // dA_log = A ⊙ Σ_rows (G·Δ·Ā·h_{t-1}) (dA/dA_log = A), dD: rows in order.
    parallelFor(C, kMinParallelWork / std::max(1, s.batch * N), [&](int64_t e0, int64_t e1) {
        std::vector<float> acc(static_cast<size_t>(N));
        for (int64_t d = e0; d < e1; ++d) {
            std::fill(acc.begin(), acc.end(), 0.f);
            float dd = 0.f, db = 0.f;
            for (int b = 0; b < s.batch; ++b) {
                const float* p = pda + (static_cast<int64_t>(b) * C + d) * N;
                for (int n = 0; n < N; ++n) acc[n] += p[n];
                dd += pdd[static_cast<int64_t>(b) * C + d];
                db += pdb[static_cast<int64_t>(b) * C + d];
            }
            for (int n = 0; n < N; ++n) s.da_log[d * N + n] += acc[n] * s.a[d * N + n];
            s.dd_skip[d] += dd;
            if (s.ddt_bias) s.ddt_bias[d] += db;
        }
    });
}

}  // namespace mamba::cpu
