// The decode matrix-vector kernel on its own (gemm/gemv.cu), llm.c style: checked, then timed next to cuBLAS on
// the real products of the four Mamba-1 sizes (in/x/dt/out projections, the tied LM head, the rmsnorm-fused
// in_proj) at 1, 2, 4 and 8 rows. Built and run by scripts/device-gemv.sh:
//
//   gemv_bench [--reps N]
//
// Checks, per product: the grid that gives every group the same number of outputs (the kernel's schedule) is
// bit-equal to one output per group (the schedule before); row 0 of 8 rows is bit-equal to row 0 alone; the
// result is within 1e-5 (relative to max |y|) of a double-precision reference on the same stored weights.
// Timing: CUDA graphs of `reps` calls rotating over enough weight copies (> 3× L2) that every call streams its
// weights from HBM, as a decode step does; medians of 5 replays. Exit status 1 when a check fails.
#include "cuda/cublas_loader.h"
#include "cuda/gemm/gemv.h"
#include "cuda/kernels.h"
#include "mamba/mamba.h"
#include "graph_timing.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace mamba;
using namespace mamba::cuda;

namespace {

int failures = 0;

void ck(cudaError_t e, const char* what) { mamba::bench::checkCuda(e, what); }

constexpr double kFloorTBs = 4.26;  // docs/benchmarks.md's floor: the H200's measured device-copy rate

cudaStream_t g_stream = nullptr;

Exec baseExec() {
    Exec e;
    ck(cudaDeviceGetAttribute(&e.sms, cudaDevAttrMultiProcessorCount, 0), "sms");
    ck(cudaDeviceGetAttribute(&e.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), "smem");
    e.pdl = false;
    return e;
}

/** One product y[rows, out] = x·Wᵀ with `copies` device copies of W (BF16 or F32 storage). */
struct Product {
    int rows, out, in, dtype, copies;
    bool norm;
    std::vector<float> x, wf, normw;  // wf: the stored weights as floats (after bf16 rounding)
    float *dx = nullptr, *dy = nullptr, *dnormw = nullptr, *dnormy = nullptr;
    std::vector<void*> dw;

    Product(int rows_, int out_, int in_, int dtype_, bool norm_, uint64_t seed)
        : rows(rows_), out(out_), in(in_), dtype(dtype_), copies(1), norm(norm_) {
        uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
        auto u = [&state](int) {  // uniform in [-1, 1): a fast LCG (the LM heads have 10^8 weights)
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            return static_cast<float>(static_cast<int64_t>(state >> 40) - (1ll << 23)) / static_cast<float>(1 << 23);
        };
        const int g = 0;
        x.resize(static_cast<size_t>(rows) * in);
        for (auto& v : x) v = u(g);
        normw.resize(in);
        for (auto& v : normw) v = 0.5f + 0.5f * u(g);
        wf.resize(static_cast<size_t>(out) * in);
        const float s = 1.f / std::sqrt(static_cast<float>(in));
        const size_t bytes = wf.size() * (dtype == DTYPE_BF16 ? 2 : 4);
        copies = static_cast<int>(std::min<size_t>(1024, (160u << 20) / bytes + 1));  // > 3× the 50 MB L2 in all
        std::vector<__nv_bfloat16> wb(wf.size());
        for (size_t i = 0; i < wf.size(); ++i) {
            const float v = u(g) * s;
            wb[i] = __float2bfloat16_rn(v);
            wf[i] = dtype == DTYPE_BF16 ? __bfloat162float(wb[i]) : v;
        }
        for (int c = 0; c < copies; ++c) {
            void* p;
            ck(cudaMalloc(&p, bytes), "malloc w");
            ck(cudaMemcpy(p, dtype == DTYPE_BF16 ? static_cast<const void*>(wb.data()) : wf.data(), bytes,
                          cudaMemcpyHostToDevice),
               "copy w");
            dw.push_back(p);
        }
        ck(cudaMalloc(&dx, x.size() * 4), "malloc x");
        ck(cudaMalloc(&dy, static_cast<size_t>(rows) * out * 4), "malloc y");
        ck(cudaMalloc(&dnormw, in * 4), "malloc norm w");
        ck(cudaMalloc(&dnormy, x.size() * 4), "malloc norm y");
        ck(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), "copy x");
        ck(cudaMemcpy(dnormw, normw.data(), in * 4, cudaMemcpyHostToDevice), "copy norm w");
    }
    ~Product() {
        for (void* p : dw) cudaFree(p);
        cudaFree(dx);
        cudaFree(dy);
        cudaFree(dnormw);
        cudaFree(dnormy);
    }
    size_t weightBytes() const { return static_cast<size_t>(out) * in * (dtype == DTYPE_BF16 ? 2 : 4); }

    void run(const Exec& e0, int copy, int nrows) {
        Exec e = e0;
        e.stream = g_stream;
        if (norm) {
            const NormPrologue np{dx, in, dnormw, 1e-5f, dnormy, in};
            gemv(e, nullptr, in, nrows, dw[copy], dtype, out, in, nullptr, dy, out, 0.f, &np);
        } else {
            gemv(e, dx, in, nrows, dw[copy], dtype, out, in, nullptr, dy, out, 0.f);
        }
    }
    std::vector<float> result(int nrows) const {
        std::vector<float> y(static_cast<size_t>(nrows) * out);
        ck(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost), "copy y");
        return y;
    }
    /** max over rows 0 and nrows − 1 of |y − ref| / max |ref| (double sums of the stored weights). */
    double error(const std::vector<float>& y, int nrows) const {
        double worst = 0, scale = 0;
        for (int r : {0, nrows - 1}) {
            std::vector<double> xr(in);
            double ss = 0;
            for (int k = 0; k < in; ++k) ss += static_cast<double>(x[r * in + k]) * x[r * in + k];
            const double inv = norm ? 1.0 / std::sqrt(ss / in + 1e-5) : 1.0;
            for (int k = 0; k < in; ++k) xr[k] = norm ? normw[k] * (x[r * in + k] * inv) : x[r * in + k];
            for (int o = 0; o < out; ++o) {
                double s = 0;
                const float* wr = &wf[static_cast<size_t>(o) * in];
                for (int k = 0; k < in; ++k) s += xr[k] * wr[k];
                worst = std::max(worst, std::fabs(s - y[static_cast<size_t>(r) * out + o]));
                scale = std::max(scale, std::fabs(s));
            }
        }
        return worst / std::max(scale, 1e-30);
    }
};

/** Microseconds per call of f(i) through a CUDA graph of `reps` calls (graph_timing.cuh). */
template <typename F>
double timeUs(F f, int reps) {
    return mamba::bench::graphTimeUs(f, reps, g_stream);
}

void check(const Exec& e, const char* name, Product& p) {
    Exec old = e;
    old.gemv_one_output_per_group = true;
    ck(cudaMemset(p.dy, 0xff, static_cast<size_t>(p.rows) * p.out * 4), "poison");
    p.run(e, 0, p.rows);
    const std::vector<float> y = p.result(p.rows);
    ck(cudaMemset(p.dy, 0xff, static_cast<size_t>(p.rows) * p.out * 4), "poison");
    p.run(old, 0, p.rows);
    const std::vector<float> y_old = p.result(p.rows);
    ck(cudaMemset(p.dy, 0xff, static_cast<size_t>(p.rows) * p.out * 4), "poison");
    p.run(e, 0, 1);
    const std::vector<float> y1 = p.result(1);
    ck(cudaDeviceSynchronize(), name);
    const double err = p.error(y, p.rows);
    const bool same_sched = std::memcmp(y.data(), y_old.data(), y.size() * 4) == 0;
    const bool same_row = std::memcmp(y.data(), y1.data(), y1.size() * 4) == 0;
    const bool ok = err < 1e-5 && same_sched && same_row;
    if (!ok) ++failures;
    std::printf("| %s | %s | %d | err %.1e | %s | %s | %s |\n", name, p.dtype == DTYPE_BF16 ? "BF16" : "F32", p.rows, err,
                same_sched ? "= one output per group" : "SCHEDULES DIFFER", same_row ? "row 0 = alone" : "ROW 0 DIFFERS",
                ok ? "PASS" : "FAIL");
}

/** One row of the timing table. */
std::string timeProduct(const Exec& e, cublasHandle h, const char* name, Product& p, int rows, int reps0) {
    const float one = 1.f, zero = 0.f;
    const int reps = std::max(reps0, p.copies);
    Exec old = e;
    old.gemv_one_output_per_group = true;
    const double now_us = timeUs([&](int i) { p.run(e, i % p.copies, rows); }, reps);
    const double old_us = timeUs([&](int i) { p.run(old, i % p.copies, rows); }, reps);
    double best_us = 1e30;
    int best_g = 0;
    for (int G : {8, 16, 32, 64, 128, 256}) {
        if (p.norm && G > 32) continue;  // the fused prologue caps the group at 32
        Exec eg = e;
        eg.gemv_group = G;
        const double us = timeUs([&](int i) { p.run(eg, i % p.copies, rows); }, reps);
        if (us < best_us) best_us = us, best_g = G;
    }
    // cuBLAS as the fast mode runs products of more rows (no fused norm): bf16 packs x, then GemmEx; f32 Sgemm.
    void* xb;
    ck(cudaMalloc(&xb, static_cast<size_t>(p.rows) * p.in * 2), "xb");
    auto vendor = [&](int i) {
        Exec es = e;
        es.stream = g_stream;
        mamba::cuda::cublas().setStream(h, g_stream);
        if (p.dtype == DTYPE_BF16) {
            rowsToLowp(es, p.dx, p.in, rows, p.in, xb, DTYPE_BF16);
            mamba::cuda::cublas().gemmEx(h, kCublasOpT, kCublasOpN, p.out, rows, p.in, &one, p.dw[i % p.copies],
                                         CUDA_R_16BF, p.in, xb, CUDA_R_16BF, p.in, &zero, p.dy, CUDA_R_32F, p.out,
                                         kCublasCompute32F, kCublasGemmDefault);
        } else {
            mamba::cuda::cublas().sgemm(h, kCublasOpT, kCublasOpN, p.out, rows, p.in, &one,
                                        static_cast<const float*>(p.dw[i % p.copies]), p.in, p.dx, p.in, &zero, p.dy,
                                        p.out);
        }
    };
    const double cu_us = timeUs(vendor, reps);
    cudaFree(xb);
    const double floor_us = p.weightBytes() / (kFloorTBs * 1e6);
    char line[256];
    std::snprintf(line, sizeof line, "| %s | %s | %d | %.1f | %.1f | %.1f | %.1f (G %d) | %d | %.2f | %.0f%% | %.0f%% |\n", name,
                p.dtype == DTYPE_BF16 ? "BF16" : "F32", rows, p.weightBytes() / 1e6, now_us, old_us, best_us, best_g,
                gemvGroupSize(e, p.dtype, p.out, p.in, true), cu_us / now_us, 100 * floor_us / now_us,
                100 * floor_us / old_us);
    return line;
}

/** The read rate the floor compares with: a plain streaming sum over 1 GiB (context for the 4.26 TB/s copy rate). */
__global__ void readKernel(const int4* p, int64_t n, int* out) {
    int s = 0;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int4 v = __ldcs(p + i);
        s += v.x ^ v.y ^ v.z ^ v.w;
    }
    if (s == 0x7fffffff) *out = s;  // keeps the loads
}

double readRateTBs(const Exec& e) {
    const int64_t n = (1ll << 30) / 16;
    int4* p;
    int* o;
    ck(cudaMalloc(&p, n * 16), "read buffer");
    ck(cudaMalloc(&o, 4), "read out");
    ck(cudaMemset(p, 1, n * 16), "read init");
    const double us = timeUs([&](int) { readKernel<<<e.sms * 8, 256, 0, g_stream>>>(p, n, o); }, 10);
    cudaFree(p);
    cudaFree(o);
    return (n * 16) / (us * 1e6);
}

}  // namespace

int main(int argc, char** argv) {
    int reps = 20;
    for (int i = 1; i < argc; ++i)
        if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    const Exec e = baseExec();
    struct Shape {
        const char* name;
        int out, in;
        bool norm;
    };
    // d_model, then in_proj [2·d_inner, d], x_proj [dt_rank + 2·16, d_inner], dt_proj [d_inner, dt_rank],
    // out_proj [d, d_inner], the tied LM head [50280, d]
    std::vector<Shape> shapes;
    static std::vector<std::string> names;
    names.reserve(64);
    for (int d : {768, 1024, 2048, 2560}) {
        const int di = 2 * d, r = (d + 15) / 16;
        const char* size = d == 768 ? "130m" : d == 1024 ? "370m" : d == 2048 ? "1.4b" : "2.8b";
        auto add = [&](const char* what, int out, int in, bool norm) {
            names.push_back(std::string(size) + " " + what);
            shapes.push_back({names.back().c_str(), out, in, norm});
        };
        add("in_proj + norm", 2 * di, d, true);
        add("in_proj", 2 * di, d, false);
        add("x_proj", r + 32, di, false);
        add("dt_proj", di, r, false);
        add("out_proj", d, di, false);
        add("LM head", 50280, d, false);
    }
    std::printf("# gemv: %d SMs, read rate %.2f TB/s (floor below: %.2f TB/s, the copy rate)\n\n", e.sms, readRateTBs(e),
                kFloorTBs);
    std::printf("| product | dtype | rows | error | schedules | batch | result |\n|---|---|---:|---|---|---|---|\n");
    cublasHandle h;
    mamba::cuda::cublas().create(&h);
    std::string timing =
        "| product | dtype | rows | MB | µs | one output per group µs | best G µs | auto G | cuBLAS ÷ ours | of floor | "
        "before, of floor |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const Shape& s : shapes)
        for (int dtype : {DTYPE_BF16, DTYPE_F32}) {
            Product p(8, s.out, s.in, dtype, s.norm, 17 + s.out + s.in);
            check(e, s.name, p);
            std::fflush(stdout);
            for (int rows : {1, 2, 4, 8}) timing += timeProduct(e, h, s.name, p, rows, reps);
        }
    std::printf("\n%s: %d failed\n\n%s", failures ? "FAILED" : "ALL PASSED", failures, timing.c_str());
    return failures ? 1 : 0;
}
