// The tensor-core tier on its own (gemm/gemm_tc.cu), llm.c style: every tile checked against the others bit for
// bit and against a double reference on sampled rows, then every tile timed next to cuBLAS (bf16 GemmEx, f32
// accumulation, default math) on the real Mamba shapes. Built and run by scripts/device-gemm-tc.sh:
//
//   gemm_tc_bench [--check-only] [--reps N] [--only SUBSTRING] [--rows 1,8]
//   (--only: time the shapes whose name contains it; --rows: these row counts only)
//
// Prints a markdown table; exit status 1 when a check fails.
#include "cuda/cublas_loader.h"
#include "cuda/gemm/gemm_tc.h"
#include "cuda/kernels.h"
#include "mamba/mamba.h"
#include "graph_timing.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace mamba;
using namespace mamba::cuda;

namespace {

int failures = 0;

void ck(cudaError_t e, const char* what) { mamba::bench::checkCuda(e, what); }

const char* tileName(TcTile t) {
    static const char* names[] = {"decode32", "64x32", "128x128", "tma128x256", "fewrows", "fewrowsf32x", "chain"};
    return t == TcTile::kAuto ? "auto" : names[static_cast<int>(t)];
}

float bf16Round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

struct Problem {
    int64_t rows;
    int out, in;
    std::vector<float> x, y0;
    std::vector<__nv_bfloat16> w;
    float *dx = nullptr, *dy = nullptr;
    __nv_bfloat16* dw = nullptr;

    Problem(int64_t rows_, int out_, int in_, uint64_t seed) : rows(rows_), out(out_), in(in_) {
        std::mt19937_64 g(seed);
        std::uniform_real_distribution<float> u(-1.f, 1.f);
        x.resize(rows * in);
        for (auto& v : x) v = u(g);
        w.resize(static_cast<size_t>(out) * in);
        const float s = 1.f / std::sqrt(static_cast<float>(in));
        for (auto& v : w) v = __float2bfloat16_rn(u(g) * s);
        ck(cudaMalloc(&dx, x.size() * 4), "malloc x");
        ck(cudaMalloc(&dy, static_cast<size_t>(rows) * out * 4), "malloc y");
        ck(cudaMalloc(&dw, w.size() * 2), "malloc w");
        ck(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), "copy x");
        ck(cudaMemcpy(dw, w.data(), w.size() * 2, cudaMemcpyHostToDevice), "copy w");
    }
    ~Problem() {
        cudaFree(dx);
        cudaFree(dy);
        cudaFree(dw);
    }
    std::vector<float> result() const {
        std::vector<float> y(static_cast<size_t>(rows) * out);
        ck(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost), "copy y");
        return y;
    }
    /** max |y − ref| / max |ref| over rows 0, rows/2, rows−1 (reference: x rounded to bf16, double sums). */
    double error(const std::vector<float>& y) const {
        double worst = 0, scale = 0;
        for (int64_t r : {int64_t{0}, rows / 2, rows - 1})
            for (int o = 0; o < out; ++o) {
                double s = 0;
                for (int k = 0; k < in; ++k)
                    s += static_cast<double>(bf16Round(x[r * in + k])) * __bfloat162float(w[static_cast<size_t>(o) * in + k]);
                worst = std::max(worst, std::fabs(s - y[r * out + o]));
                scale = std::max(scale, std::fabs(s));
            }
        return worst / std::max(scale, 1e-30);
    }
};

cudaStream_t g_stream = nullptr;  // where run() launches (timeUs swaps in its capture stream)

constexpr size_t kWorkspaceBytes = size_t{256} << 20;  // 16384 rows of the widest input in one pass

void* workspace() {
    static void* ws = nullptr;
    if (!ws) ck(cudaMalloc(&ws, kWorkspaceBytes), "workspace");
    return ws;
}

void run(const Exec& e0, Problem& p, TcTile t, const float* bias = nullptr, float beta = 0.f) {
    Exec e = e0;
    e.stream = g_stream;
    gemmTensorTier(e, p.dx, p.in, p.rows, p.dw, DTYPE_BF16, p.out, p.in, bias, p.dy, p.out, beta, workspace(),
                   kWorkspaceBytes, t);
}

bool tileFits(const Exec& e, TcTile t, int64_t rows, int out, int in) {
    const bool decode = t == TcTile::kDecode32 || t == TcTile::kFewRowsF32x;
    const bool split = tensorTierParts(e, out, in) > 1;  // products split over k run on the TMA and chain tiles only
    const bool parts = t == TcTile::kFewRows || t == TcTile::kFewRowsF32x || t == TcTile::kTma128x256 ||
                       t == TcTile::kChain || t == TcTile::kAuto;
    return (!decode || rows <= 16) && (t != TcTile::kChain || rows <= kChainMaxRows) &&
           (t != TcTile::kFewRows || rows <= 64) && (!split || parts) && (t == TcTile::kAuto || tensorTileRuns(e, t));
}

/** Every tile on one product: the same bits, and close to the reference. */
void checkTiles(const Exec& e, int64_t rows, int out, int in) {
    Problem p(rows, out, in, 1234 + rows + out);
    std::vector<float> first;
    for (int ti = 0; ti < static_cast<int>(TcTile::kCount); ++ti) {
        const TcTile t = static_cast<TcTile>(ti);
        if (!tileFits(e, t, rows, out, in)) continue;
        ck(cudaMemset(p.dy, 0xff, static_cast<size_t>(rows) * out * 4), "poison");
        run(e, p, t);
        ck(cudaDeviceSynchronize(), tileName(t));
        const std::vector<float> y = p.result();
        const double err = p.error(y);
        const bool same = first.empty() || std::memcmp(first.data(), y.data(), y.size() * 4) == 0;
        if (first.empty()) first = y;
        const bool ok = err < 2e-3 && same;
        if (!ok) ++failures;
        std::printf("| check | rows=%lld out=%d in=%d | %s | err %.2e | %s | %s |\n", static_cast<long long>(rows), out, in,
                    tileName(t), err, same ? "bits = first tile" : "BITS DIFFER", ok ? "PASS" : "FAIL");
    }
    // The epilogue with a bias and beta = 0.75 over a fixed y: the same bits from every tile.
    std::vector<float> bias(out), y0(static_cast<size_t>(rows) * out);
    std::mt19937_64 g(77);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (auto& v : bias) v = u(g);
    for (auto& v : y0) v = u(g);
    float* db = nullptr;
    ck(cudaMalloc(&db, bias.size() * 4), "bias");
    ck(cudaMemcpy(db, bias.data(), bias.size() * 4, cudaMemcpyHostToDevice), "copy bias");
    std::vector<float> firstEpi;
    for (int ti = 0; ti < static_cast<int>(TcTile::kCount); ++ti) {
        const TcTile t = static_cast<TcTile>(ti);
        if (!tileFits(e, t, rows, out, in)) continue;
        ck(cudaMemcpy(p.dy, y0.data(), y0.size() * 4, cudaMemcpyHostToDevice), "copy y0");
        run(e, p, t, db, 0.75f);
        ck(cudaDeviceSynchronize(), tileName(t));
        const std::vector<float> y = p.result();
        // y − (0.75·y0 + bias) is the product: checked against the reference like above
        std::vector<float> prod(y.size());
        for (size_t i = 0; i < y.size(); ++i) prod[i] = y[i] - (0.75f * y0[i] + bias[i % out]);
        const double err = p.error(prod);
        const bool same = firstEpi.empty() || std::memcmp(firstEpi.data(), y.data(), y.size() * 4) == 0;
        if (firstEpi.empty()) firstEpi = y;
        const bool ok = err < 5e-3 && same;
        if (!ok) ++failures;
        std::printf("| check | rows=%lld out=%d in=%d, bias, beta 0.75 | %s | err %.2e | %s | %s |\n",
                    static_cast<long long>(rows), out, in, tileName(t), err, same ? "bits = first tile" : "BITS DIFFER",
                    ok ? "PASS" : "FAIL");
    }
    cudaFree(db);
}

/** Microseconds per call: `reps` calls captured in a CUDA graph, median replay / reps (graph_timing.cuh). */
template <typename F>
double timeUs(F f, int reps) {
    return mamba::bench::graphTimeUs([&](int) { f(); }, reps, g_stream);
}

/** y = x·Wᵀ as the fast mode runs it: x packed to bf16 into xb, then cublasGemmEx (f32 accumulation). */
void vendorProduct(const Exec& e0, cublasHandle h, Problem& p, __nv_bfloat16* xb) {
    Exec e = e0;
    e.stream = g_stream;
    const float one = 1.f, zero = 0.f;
    mamba::cuda::cublas().setStream(h, g_stream);
    rowsToLowp(e, p.dx, p.in, p.rows, p.in, xb, DTYPE_BF16);
    mamba::cuda::cublas().gemmEx(h, kCublasOpT, kCublasOpN, p.out, static_cast<int>(p.rows), p.in, &one, p.dw,
                                 CUDA_R_16BF, p.in, xb, CUDA_R_16BF, p.in, &zero, p.dy, CUDA_R_32F, p.out,
                                 kCublasCompute32F, kCublasGemmDefault);
}

void timeShape(const Exec& e, cublasHandle h, const char* name, int64_t rows, int out, int in, int reps) {
    Problem p(rows, out, in, 99);
    __nv_bfloat16* xb;
    ck(cudaMalloc(&xb, static_cast<size_t>(rows) * in * 2), "xb");
    auto vendor = [&] { vendorProduct(e, h, p, xb); };  // (the packing is part of its time)
    const double cu = timeUs(vendor, reps);
    mamba::cuda::cublas().setMathMode(h, kCublasPedanticMath);  // CUBLAS_PEDANTIC's path, same packing
    const double pedantic = timeUs(vendor, reps);
    mamba::cuda::cublas().setMathMode(h, kCublasDefaultMath);
    const double flops = 2.0 * rows * out * in, bytes = 2.0 * out * in + 4.0 * rows * (in + out);
    std::string best;
    double bestUs = 1e30;
    std::string row;
    for (int ti = -1; ti < static_cast<int>(TcTile::kCount); ++ti) {
        const TcTile t = static_cast<TcTile>(ti);
        if (!tileFits(e, t, rows, out, in)) continue;
        const double us = timeUs([&] { run(e, p, t); }, reps);
        char cell[64];
        std::snprintf(cell, sizeof cell, " %s %.1f |", tileName(t), us);
        row += cell;
        if (ti >= 0 && us < bestUs) bestUs = us, best = tileName(t);
        if (ti == -1) {
            std::printf("| %s | %lld | %.1f | %.1f | %.1f | %.2fx | %.0f | %.0f |", name, static_cast<long long>(rows), cu,
                        pedantic, us, cu / us, flops / us / 1e6, bytes / us / 1e3);
        }
    }
    std::printf(" best %s %.1f |%s\n", best.c_str(), bestUs, row.c_str());
    cudaFree(xb);
}

}  // namespace

int main(int argc, char** argv) {
    bool checkOnly = false;
    int reps = 20;
    const char* only = "";
    std::vector<int64_t> rowCounts{1, 8, 16, 64, 256, 4096, 16384};
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--check-only")) checkOnly = true;
        else if (!std::strcmp(argv[i], "--rows") && i + 1 < argc) {  // --rows 1,8: time these row counts only
            rowCounts.clear();
            for (const char* p = argv[++i]; *p;) {
                rowCounts.push_back(std::atoll(p));
                while (*p && *p != ',') ++p;
                if (*p == ',') ++p;
            }
        }
        else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
        else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    }
    const Exec e = deviceExec(0);
    for (int i = 1; i + 4 < argc; ++i)
        if (!std::strcmp(argv[i], "--one")) {  // --one ROWS OUT IN TILE: one product, for a profiler (TILE 99: cuBLAS)
            Problem p(std::atoll(argv[i + 1]), std::atoi(argv[i + 2]), std::atoi(argv[i + 3]), 5);
            const int tile = std::atoi(argv[i + 4]);
            cublasHandle h = nullptr;
            __nv_bfloat16* xb = nullptr;
            if (tile == 99) {
                mamba::cuda::cublas().create(&h);
                ck(cudaMalloc(&xb, static_cast<size_t>(p.rows) * p.in * 2), "xb");
            }
            for (int r = 0; r < 3; ++r) {
                if (tile == 99) vendorProduct(e, h, p, xb);
                else run(e, p, static_cast<TcTile>(tile));
            }
            ck(cudaDeviceSynchronize(), "one");
            return 0;
        }
    std::printf("# tensor-core tier: %d SMs; parts of k: 2.8b out_proj %d, x_proj %d, 1.4b out_proj %d, 130m out_proj %d\n\n| what | shape | tile | error | bits | result |\n|---|---|---|---|---|---|\n", e.sms,
                tensorTierParts(e, 2560, 5120), tensorTierParts(e, 192, 5120), tensorTierParts(e, 2048, 4096),
                tensorTierParts(e, 768, 1536));
    checkTiles(e, 1, 3000, 768);
    checkTiles(e, 2, 3072, 768);     // the chain tile's rows: 1 … 8
    checkTiles(e, 8, 1000, 520);
    checkTiles(e, 3, 80, 1536);      // 130m x_proj: 4 parts of k on Hopper
    checkTiles(e, 8, 2560, 5120);    // 2 parts
    checkTiles(e, 1, 1536, 48);      // dt_proj: one k16 step and a half
    checkTiles(e, 5, 1000, 520);
    checkTiles(e, 16, 777, 1024);
    checkTiles(e, 40, 600, 264);
    checkTiles(e, 300, 1100, 776);
    checkTiles(e, 1000, 3072, 768);
    checkTiles(e, 257, 2560, 5120);
    checkTiles(e, 33, 10240, 2560);  // the few-rows tile's 64-wide blocks
    checkTiles(e, 64, 2560, 776);    // its 32-wide blocks, a partial last k tile
    // Products split over k (tensorTierParts on Hopper): x_proj and out_proj shapes (2, 4 and 8 parts), a last part
    // with a partial k tile, a width that is not a whole number of blocks.
    checkTiles(e, 1, 768, 1536);     // not split (in ≤ kDeepPart)
    checkTiles(e, 7, 1024, 2600);    // 2 parts
    checkTiles(e, 64, 2560, 5120);
    checkTiles(e, 300, 2048, 4096);
    checkTiles(e, 16, 520, 5200);    // 4 parts
    checkTiles(e, 1, 192, 5120);
    checkTiles(e, 5, 100, 1160);
    checkTiles(e, 16, 80, 1536);
    checkTiles(e, 64, 192, 5120);
    checkTiles(e, 300, 192, 5120);
    std::printf("\n%s: %d failed\n\n", failures ? "FAILED" : "ALL PASSED", failures);
    if (checkOnly) return failures ? 1 : 0;
    cublasHandle h;
    mamba::cuda::cublas().create(&h);
    std::printf("| shape | M | cuBLAS us | cuBLAS pedantic us | auto us | cuBLAS/auto | auto TFLOP/s | auto GB/s | tiles (us) |\n"
                "|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
    struct S {
        const char* name;
        int out, in;
    };
    // Every product of the four Mamba-1 sizes (d_model 768/1024/2048/2560, d_inner = 2·d_model, d_state 16,
    // dt_rank = d_model/16): in_proj [2E, D], x_proj [dt_rank + 32, E], dt_proj [E, dt_rank], out_proj [D, E].
    for (const S& s : {S{"130m in_proj", 3072, 768}, S{"130m x_proj", 80, 1536}, S{"130m dt_proj", 1536, 48},
                       S{"130m out_proj", 768, 1536}, S{"370m in_proj", 4096, 1024}, S{"370m x_proj", 96, 2048},
                       S{"370m dt_proj", 2048, 64}, S{"370m out_proj", 1024, 2048}, S{"1.4b in_proj", 8192, 2048},
                       S{"1.4b x_proj", 160, 4096}, S{"1.4b dt_proj", 4096, 128}, S{"1.4b out_proj", 2048, 4096},
                       S{"2.8b in_proj", 10240, 2560}, S{"2.8b x_proj", 192, 5120}, S{"2.8b dt_proj", 5120, 160},
                       S{"2.8b out_proj", 2560, 5120}})
        if (std::strstr(s.name, only))
            for (int64_t rows : rowCounts) timeShape(e, h, s.name, rows, s.out, s.in, reps);
    return failures ? 1 : 0;
}
