// Do the training products need our f32 → bf16 packing pass at all? Side by side on the 130m LM step's shapes
// (B 8 × T 2,048 rows; the LM head in its blocks of 1,334 rows), for each kind of product:
//  - packed: the activations packed to bf16 by rowsToLowp (convert.cu), then cublasGemmEx on bf16 operands (W's
//    stored bf16 copy) with f32 accumulation — what gemm.cu runs today;
//  - fast16bf: cublasGemmEx on the f32 operands themselves (W's f32 master) with CUBLAS_COMPUTE_32F_FAST_16BF,
//    which lets cuBLAS round them to bf16 inside its own kernels.
// Prints a markdown table: µs of each (CUDA graphs of `reps` calls, graph_timing.cuh), the packing's share, and
// whether the two results are bit for bit equal (max |Δ| otherwise). Built and run by scripts/device-pack-gemm.sh.
//
//   pack_gemm_bench [--reps N]
#include "cuda/cublas_loader.h"
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

constexpr int kCompute32FFast16BF = 75;  // CUBLAS_COMPUTE_32F_FAST_16BF (cublas_api.h)

cudaStream_t g_stream = nullptr;

void ck(cudaError_t e, const char* what) { mamba::bench::checkCuda(e, what); }

void ckb(int status, const char* what) {
    if (status != 0) {
        std::fprintf(stderr, "%s: cuBLAS status %d\n", what, status);
        std::exit(2);
    }
}

float* deviceRandom(size_t n, float scale, uint64_t seed) {
    std::mt19937_64 g(seed);
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> h(n);
    for (auto& v : h) v = u(g);
    float* d;
    ck(cudaMalloc(&d, n * 4), "malloc");
    ck(cudaMemcpy(d, h.data(), n * 4, cudaMemcpyHostToDevice), "copy");
    return d;
}

enum class Kind { Forward, BackwardData, WeightGrad };

struct Shape {
    const char* name;
    int64_t rows;
    int out, in;
};

/** One product of one kind: its f32 operands, W's bf16 copy, packing room and two outputs. */
struct Case {
    Kind kind;
    Shape s;
    float *w32, *act, *act2 = nullptr, *c_packed, *c_fast;  // act: x (Forward) or dy; act2: x (WeightGrad)
    void *wbf, *pack, *pack2;
    size_t c_floats;

    Case(Kind k, const Shape& sh) : kind(k), s(sh) {
        const size_t wn = static_cast<size_t>(s.out) * s.in;
        w32 = deviceRandom(wn, 1.f / std::sqrt(static_cast<float>(s.in)), 1);
        ck(cudaMalloc(&wbf, wn * 2), "wbf");
        Exec e = deviceExec(0);
        rowsToLowp(e, w32, s.in, s.out, s.in, wbf, DTYPE_BF16);  // W's stored copy: round to nearest of the master
        const int act_cols = k == Kind::Forward ? s.in : s.out;
        act = deviceRandom(static_cast<size_t>(s.rows) * act_cols, 1.f, 2);
        ck(cudaMalloc(&pack, static_cast<size_t>(s.rows) * act_cols * 2), "pack");
        pack2 = nullptr;
        if (k == Kind::WeightGrad) {
            act2 = deviceRandom(static_cast<size_t>(s.rows) * s.in, 1.f, 3);
            ck(cudaMalloc(&pack2, static_cast<size_t>(s.rows) * s.in * 2), "pack2");
        }
        c_floats = k == Kind::Forward ? s.rows * s.out : k == Kind::BackwardData ? s.rows * s.in : wn;
        ck(cudaMalloc(&c_packed, c_floats * 4), "c");
        ck(cudaMalloc(&c_fast, c_floats * 4), "c");
        ck(cudaDeviceSynchronize(), "setup");
    }
    ~Case() {
        for (void* p : {static_cast<void*>(w32), wbf, static_cast<void*>(act), static_cast<void*>(act2), pack, pack2,
                        static_cast<void*>(c_packed), static_cast<void*>(c_fast)})
            if (p) cudaFree(p);
    }

    /** The packing pass alone. */
    void packOnly() {
        Exec e = deviceExec(0);
        e.stream = g_stream;
        const int act_cols = kind == Kind::Forward ? s.in : s.out;
        rowsToLowp(e, act, act_cols, s.rows, act_cols, pack, DTYPE_BF16);
        if (act2) rowsToLowp(e, act2, s.in, s.rows, s.in, pack2, DTYPE_BF16);
    }

    /** bf16 operands (packed here) or f32 operands with FAST_16BF; beta 0 (WeightGrad: a fresh gradient). */
    void product(cublasHandle h, bool fast) {
        const CublasApi& api = cublas();
        api.setStream(h, g_stream);
        const float one = 1.f, zero = 0.f;
        const int rows = static_cast<int>(s.rows);
        const int dt = fast ? CUDA_R_32F : CUDA_R_16BF;
        const int compute = fast ? kCompute32FFast16BF : kCublasCompute32F;
        if (!fast) packOnly();
        const void* a = fast ? static_cast<const void*>(act) : pack;
        const void* w = fast ? static_cast<const void*>(w32) : wbf;
        float* c = fast ? c_fast : c_packed;
        int st = 0;
        switch (kind) {
            case Kind::Forward:  // yᶜ(out×rows) = (Wᶜ)ᵀ · xᶜ
                st = api.gemmEx(h, kCublasOpT, kCublasOpN, s.out, rows, s.in, &one, w, cudaDataType(dt), s.in, a,
                                cudaDataType(dt), s.in, &zero, c, CUDA_R_32F, s.out, compute, kCublasGemmDefault);
                break;
            case Kind::BackwardData:  // dxᶜ(in×rows) = Wᶜ(in×out) · dyᶜ
                st = api.gemmEx(h, kCublasOpN, kCublasOpN, s.in, rows, s.out, &one, w, cudaDataType(dt), s.in, a,
                                cudaDataType(dt), s.out, &zero, c, CUDA_R_32F, s.in, compute, kCublasGemmDefault);
                break;
            case Kind::WeightGrad: {  // dwᶜ(in×out) = xᶜ · (dyᶜ)ᵀ
                const void* x = fast ? static_cast<const void*>(act2) : pack2;
                st = api.gemmEx(h, kCublasOpN, kCublasOpT, s.in, s.out, rows, &one, x, cudaDataType(dt), s.in, a,
                                cudaDataType(dt), s.out, &zero, c, CUDA_R_32F, s.in, compute, kCublasGemmDefault);
                break;
            }
        }
        ckb(st, fast ? "gemmEx FAST_16BF" : "gemmEx bf16");
    }
};

const char* kindName(Kind k) {
    return k == Kind::Forward ? "forward" : k == Kind::BackwardData ? "backward data" : "weight grad";
}

double flops(Kind, const Shape& s) { return 2.0 * s.rows * s.out * s.in; }

}  // namespace

int main(int argc, char** argv) {
    int reps = 10;
    for (int i = 1; i < argc; ++i)
        if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    const CublasApi& api = cublas();
    cublasHandle h;
    ckb(api.create(&h), "create");
    api.setMathMode(h, kCublasDefaultMath);
    void* ws;
    ck(cudaMalloc(&ws, 64 << 20), "workspace");
    api.setWorkspace(h, ws, 64 << 20);
    cudaDeviceProp prop;
    ck(cudaGetDeviceProperties(&prop, 0), "props");
    std::printf("# %s, %s, reps %d\n\n", prop.name, api.library.c_str(), reps);
    std::printf("| product | kind | rows | pack µs | packed (pack + bf16 gemm) µs | fast16bf µs | fast ÷ packed | "
                "fast TFLOP/s | bits |\n|---|---|---:|---:|---:|---:|---:|---:|---|\n");
    const Shape shapes[] = {{"in_proj 768→3072", 16384, 3072, 768},  {"x_proj 1536→80", 16384, 80, 1536},
                            {"dt_proj 48→1536", 16384, 1536, 48},    {"out_proj 1536→768", 16384, 768, 1536},
                            {"LM head 768→50280", 1334, 50280, 768}, {"in_proj 2048→8192", 16384, 8192, 2048},
                            {"out_proj 4096→2048", 16384, 2048, 4096}};
    double total_packed = 0, total_fast = 0;
    for (const Shape& s : shapes) {
        for (Kind k : {Kind::Forward, Kind::BackwardData, Kind::WeightGrad}) {
            Case c(k, s);
            const double tp = mamba::bench::graphTimeUs([&](int) { c.packOnly(); }, reps, g_stream);
            const double tpk = mamba::bench::graphTimeUs([&](int) { c.product(h, false); }, reps, g_stream);
            const double tf = mamba::bench::graphTimeUs([&](int) { c.product(h, true); }, reps, g_stream);
            ck(cudaDeviceSynchronize(), "run");
            std::vector<float> a(c.c_floats), b(c.c_floats);
            ck(cudaMemcpy(a.data(), c.c_packed, a.size() * 4, cudaMemcpyDeviceToHost), "copy back");
            ck(cudaMemcpy(b.data(), c.c_fast, b.size() * 4, cudaMemcpyDeviceToHost), "copy back");
            double maxd = 0, maxa = 0;
            size_t differ = 0;
            for (size_t i = 0; i < a.size(); ++i) {
                if (std::memcmp(&a[i], &b[i], 4)) ++differ;
                maxd = std::max(maxd, static_cast<double>(std::fabs(a[i] - b[i])));
                maxa = std::max(maxa, static_cast<double>(std::fabs(a[i])));
            }
            char bits[96];
            if (differ == 0) std::snprintf(bits, sizeof bits, "equal");
            else std::snprintf(bits, sizeof bits, "%zu of %zu differ, max |Δ| %.2e (max |c| %.2e)", differ, a.size(),
                               maxd, maxa);
            if (s.out != 8192 && s.out != 2048) {
                total_packed += tpk;
                total_fast += tf;
            }
            std::printf("| %s | %s | %lld | %.1f | %.1f | %.1f | %.2f | %.0f | %s |\n", s.name, kindName(k),
                        static_cast<long long>(s.rows), tp, tpk, tf, tf / tpk, flops(k, s) / tf * 1e-6, bits);
            std::fflush(stdout);
        }
    }
    std::printf("\n130m shapes, one of each product: packed %.1f µs, fast16bf %.1f µs\n", total_packed, total_fast);
    return 0;
}
