// The tensor-core tier's Hopper tiles: the same numeric contract as gemm_tc.cu's mma.sync tiles (gemm_tc.h), run
// by wgmma (warpgroup MMA, sm_90a). This file is compiled for sm_90a alone (cppbuild.sh); gemm_tc.cu offers its
// tiles only on a compute-capability 9.0 device.
//
// Why it keeps the contract: an output element is still ONE chain of k16 steps in ascending k into one f32
// register that starts at +0 — wgmma.m64nNk16 is that step for 64 rows × N columns at once — with the chunks
// entirely past `in` skipped as the mma.sync tiles skip them. Whether the Hopper tensor core's m64nNk16 step rounds
// exactly as its m16n8k16 step does is a property of the hardware, not of this code: the op cases
// `tiles.gemm.tensor` and `invariant.gemm.forward` and `gemm_tc_bench`'s checks compare the tiles bit for bit, and
// the auto rule uses these tiles only where they have proved equal.
//
// The kernel: 128 rows × BN columns per block, two consumer warpgroups (rows 0–63 and 64–127) that also issue the
// loads; both operands (x packed to W's type, W) stream through S shared-memory stages with cp.async in the 128-byte
// swizzle that wgmma's descriptors name (TileLoad's 16-byte chunk c ^ (row & 7) within 1024-byte atoms, so stage
// bases are 1024-aligned). One wgmma batch stays in flight while the next stage is requested.
#include "gemm_tc.h"
#include "gemm_tc_parts.cuh"

#include "mamba/mamba.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

namespace mamba::cuda {
namespace {
using namespace tc;

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MAMBA_WGMMA 1
#endif

// ---- wgmma PTX ----

/**
 * A shared-memory matrix descriptor for a K-major operand in the 128-byte swizzle: rows of 128 bytes (64 16-bit
 * values of k), 8-row atoms of 1024 bytes one after another (stride 1024); the leading offset is unused in this mode.
 */
__device__ __forceinline__ uint64_t swizzled128(uint32_t addr) {
    return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) |
           (uint64_t{1} << 62);
}

__device__ __forceinline__ void wgmmaFence() {
#ifdef MAMBA_WGMMA
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmmaCommit() {
#ifdef MAMBA_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmmaWait() {
#ifdef MAMBA_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
/** cp.async wrote the stage through the generic proxy; wgmma reads it through the async proxy. */
__device__ __forceinline__ void fenceProxyAsync() {
#ifdef MAMBA_WGMMA
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
/** Keeps the compiler from moving accumulator registers across an in-flight wgmma. */
template <int N>
__device__ __forceinline__ void pinRegisters(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/** d (64 × N per warpgroup, f32) += A (64 × 16, descriptor a) · B (N × 16, descriptor b)ᵀ: one k16 step. */
template <typename T, int N>
__device__ __forceinline__ void wgmma(float (&d)[N / 2], uint64_t a, uint64_t b);

#ifdef MAMBA_WGMMA
// The operand lists are written out: PTX names every accumulator register of the instruction.
template <>
__device__ __forceinline__ void wgmma<__nv_bfloat16, 128>(float (&d)[64], uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20,"
        "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39,"
        "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58,"
        "%59, %60, %61, %62, %63},"
        " %64, %65, p, 1, 1, 0, 0;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
            "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
            "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
            "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
            "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
            "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
            "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
            "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
            "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "n"(1));
}
template <>
__device__ __forceinline__ void wgmma<__nv_bfloat16, 256>(float (&d)[128], uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20,"
        "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39,"
        "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58,"
        "%59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77,"
        "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96,"
        "%97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112,"
        "%113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127},"
        " %128, %129, p, 1, 1, 0, 0;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
            "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
            "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
            "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
            "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
            "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
            "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
            "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
            "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
            "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),
            "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),
            "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),
            "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),
            "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]),
            "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]),
            "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]),
            "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
            "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]),
            "+f"(d[127])
        : "l"(a), "l"(b), "n"(1));
}
template <>
__device__ __forceinline__ void wgmma<__half, 128>(float (&d)[64], uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20,"
        "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39,"
        "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58,"
        "%59, %60, %61, %62, %63},"
        " %64, %65, p, 1, 1, 0, 0;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
            "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
            "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
            "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
            "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
            "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
            "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
            "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
            "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "n"(1));
}
template <>
__device__ __forceinline__ void wgmma<__half, 256>(float (&d)[128], uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20,"
        "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39,"
        "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58,"
        "%59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77,"
        "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96,"
        "%97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112,"
        "%113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127},"
        " %128, %129, p, 1, 1, 0, 0;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
            "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
            "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
            "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
            "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
            "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
            "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
            "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
            "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
            "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),
            "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),
            "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),
            "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),
            "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]),
            "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]),
            "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]),
            "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
            "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]),
            "+f"(d[127])
        : "l"(a), "l"(b), "n"(1));
}
#else
template <typename T, int N>
__device__ __forceinline__ void wgmma(float (&)[N / 2], uint64_t, uint64_t) {
    __trap();  // not sm_90a: gemm_tc.cu never launches these tiles there
}
#endif

// ---- the kernel ----

template <int BN, int S>
struct WgTile {
    static constexpr int kThreads = 256, BM = 128, BK = 64;
    static constexpr int kStageBytes = (BM + BN) * BK * 2;  // x tile, then weight tile
    static constexpr size_t kSmem = static_cast<size_t>(S) * kStageBytes + 1024;  // + room to align to 1024
};

template <typename T, int BN, int S>
__global__ void __launch_bounds__(256, 1) wgmmaTierKernel(TcArgs a, const T* __restrict__ xp) {
    using L = WgTile<BN, S>;
    constexpr int BK = L::BK, KK = BK / 16, NACC = BN / 2;
    extern __shared__ __align__(1024) unsigned char tc_smem[];
    const uint32_t base = (smemAddr(tc_smem) + 1023u) & ~1023u;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wg = warp >> 2;
    const int64_t m0 = static_cast<int64_t>(blockIdx.x) * L::BM;  // M tiles vary fastest, as in gemm_tc.cu
    const int n0 = blockIdx.y * BN;
    const T* W = static_cast<const T*>(a.w);
    const int K = a.in, KT = (K + BK - 1) / BK;
    const TileLoad<L::BM, BK, L::kThreads> xload;
    const TileLoad<BN, BK, L::kThreads> wload;
    constexpr uint32_t kB = L::BM * BK * 2;  // the weight tile's offset in a stage
    constexpr int kAhead = S - 2;            // tiles requested ahead: one stage is read, one may still be in wgmma

#pragma unroll
    for (int s = 0; s < kAhead; ++s)
        if (s < KT) wload.load(base + s * L::kStageBytes + kB, W, n0, a.out, K, s);
    pdlWait();
    pdlLaunchDependents();
#pragma unroll
    for (int s = 0; s < kAhead; ++s) {
        if (s < KT) xload.load(base + s * L::kStageBytes, xp, m0, a.rows, K, s);
        cpAsyncCommit();
    }

    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.f;
    int st = 0;
    for (int kt = 0; kt < KT; ++kt) {
        cpAsyncWait<kAhead - 1>();  // this thread's copies of tile kt have landed
        fenceProxyAsync();
        __syncthreads();  // everyone's have; and every warpgroup has finished the wgmma of tile kt − 2
        const int next = kt + kAhead;
        const int nst = (st + kAhead) % S;
        if (next < KT) {
            wload.load(base + nst * L::kStageBytes + kB, W, n0, a.out, K, next);
            xload.load(base + nst * L::kStageBytes, xp, m0, a.rows, K, next);
        }
        cpAsyncCommit();
        const uint32_t sA = base + st * L::kStageBytes + wg * 64 * BK * 2, sB = base + st * L::kStageBytes + kB;
        const uint64_t da = swizzled128(sA), db = swizzled128(sB);
        const int chunks = min(KK, (K - kt * BK + 15) / 16);  // chunks entirely past `in` are skipped
        wgmmaFence();
        if (chunks == KK) {  // (a separate unconditional batch: branches between wgmmas make ptxas serialise them)
#pragma unroll
            for (int kk = 0; kk < KK; ++kk) wgmma<T, BN>(acc, da + 2 * kk, db + 2 * kk);  // + 32 bytes of k per step
        } else {
            for (int kk = 0; kk < chunks; ++kk) wgmma<T, BN>(acc, da + 2 * kk, db + 2 * kk);
        }
        wgmmaCommit();
        wgmmaWait<1>();  // the batch of tile kt − 1 is done (this one's stays in flight over the next requests)
        st = st == S - 1 ? 0 : st + 1;
    }
    wgmmaWait<0>();
    pinRegisters(acc);
    cpAsyncWait<0>();

    // Accumulator e of column group j: row 16·(warp % 4) + lane/4 (+8 for e ≥ 2), column 8j + 2·(lane % 4) + e % 2.
    const int64_t r0 = m0 + wg * 64 + (warp & 3) * 16 + (lane >> 2);
    const int c0 = n0 + (lane & 3) * 2;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int64_t m = r0 + (e >> 1) * 8;
            const int n = c0 + j * 8 + (e & 1);
            if (m < a.rows && n < a.out) finishElement(a, m, n, acc[j * 4 + e]);
        }
}

template <typename T, int BN, int S>
void launchWg(const Exec& ex, const TcArgs& a, const T* xp) {
    using L = WgTile<BN, S>;
    const auto kernel = wgmmaTierKernel<T, BN, S>;
    if (L::kSmem > static_cast<size_t>(ex.smem_optin))
        throw std::runtime_error("gemm (tensor-core tier, wgmma): a tile needs " + std::to_string(L::kSmem) +
                                 " bytes of shared memory; the device offers " + std::to_string(ex.smem_optin));
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(L::kSmem)),
          "cudaFuncSetAttribute (wgmma tier shared memory)");
    launch("gemm (tensor-core tier, wgmma)", ex, kernel, dim3(blocksFor(a.rows, L::BM), blocksFor(a.out, BN)),
           dim3(L::kThreads), L::kSmem, a, xp);
}

template <typename T>
void launchWgTile(const Exec& ex, const TcArgs& a, const void* xp, TcTile tile) {
    const T* p = static_cast<const T*>(xp);
    switch (tile) {
        case TcTile::kWg128x128: launchWg<T, 128, 6>(ex, a, p); break;
        case TcTile::kWg128x256: launchWg<T, 256, 4>(ex, a, p); break;
        default: throw std::logic_error("gemm (tensor-core tier): not a wgmma tile");
    }
}

}  // namespace

void launchWgmmaTile(const Exec& ex, const TcArgs& a, const void* xp, int wdtype, TcTile tile) {
    if (ex.cc != 90) throw std::logic_error("gemm (tensor-core tier): wgmma tiles need a compute-capability 9.0 device");
    if (wdtype == DTYPE_BF16) launchWgTile<__nv_bfloat16>(ex, a, xp, tile);
    else launchWgTile<__half>(ex, a, xp, tile);
}

}  // namespace mamba::cuda
