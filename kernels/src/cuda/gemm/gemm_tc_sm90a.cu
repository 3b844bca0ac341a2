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
// The kernel (measured against cp.async-fed variants and a 128×128 tile on the H200, docs/benchmarks.md): 128 rows
// × 256 columns per block; a producer warp requests both operands (x packed to W's type, W) by TMA into 4 stages,
// two consumer warpgroups chain the wgmma steps, and the output tile leaves through shared memory in 16-byte runs.
// Blocks run in a grouped order that keeps a wave's operands in L2.
#include "gemm_tc.h"
#include "gemm_tc_parts.cuh"

#include "../lowp.cuh"

#include "mamba/mamba.h"

#include <cooperative_groups.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

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
// One specialisation per shape, written once for both 16-bit types (the PTX type name is the only difference).
#define MAMBA_WGMMA_N256(T, PT) \
template <>                                                                                                   \
__device__ __forceinline__ void wgmma<T, 256>(float (&d)[128], uint64_t a, uint64_t b) {                      \
    asm volatile(                                                                                             \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                         \
        "wgmma.mma_async.sync.aligned.m64n256k16.f32." PT "." PT " "                                          \
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20,"     \
        "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39,"      \
        "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58,"      \
        "%59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77,"      \
        "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96,"      \
        "%97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112,"        \
        "%113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127},"          \
        " %128, %129, p, 1, 1, 0, 0;\n}\n"                                                                    \
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),   \
            "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),          \
            "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),        \
            "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),        \
            "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),        \
            "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),        \
            "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),        \
            "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),        \
            "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),        \
            "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),        \
            "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),        \
            "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),        \
            "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),        \
            "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]),        \
            "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]),  \
            "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), \
            "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
            "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), \
            "+f"(d[127])                                                                                      \
        : "l"(a), "l"(b), "n"(1));                                                                            \
}

#define MAMBA_WGMMA_N32(T, PT) \
template <>                                                                                                      \
__device__ __forceinline__ void wgmma<T, 32>(float (&d)[16], uint64_t a, uint64_t b) {                           \
    asm volatile(                                                                                                \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                                             \
        "wgmma.mma_async.sync.aligned.m64n32k16.f32." PT "." PT " "                                              \
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15},"                                \
        " %16, %17, p, 1, 1, 0, 0;\n}\n"                                                                         \
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),      \
            "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]) \
        : "l"(a), "l"(b), "n"(1));                                                                               \
}

#define MAMBA_WGMMA_N64(T, PT) \
template <>                                                                                                 \
__device__ __forceinline__ void wgmma<T, 64>(float (&d)[32], uint64_t a, uint64_t b) {                      \
    asm volatile(                                                                                           \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                        \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." PT "." PT " "                                         \
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20,"   \
        "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},"                                           \
        " %32, %33, p, 1, 1, 0, 0;\n}\n"                                                                    \
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
            "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),        \
            "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),      \
            "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),      \
            "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                                           \
        : "l"(a), "l"(b), "n"(1));                                                                          \
}

MAMBA_WGMMA_N256(__nv_bfloat16, "bf16")
MAMBA_WGMMA_N256(__half, "f16")
MAMBA_WGMMA_N32(__nv_bfloat16, "bf16")
MAMBA_WGMMA_N32(__half, "f16")
MAMBA_WGMMA_N64(__nv_bfloat16, "bf16")
MAMBA_WGMMA_N64(__half, "f16")
#undef MAMBA_WGMMA_N256
#undef MAMBA_WGMMA_N32
#undef MAMBA_WGMMA_N64
#else
template <typename T, int N>
__device__ __forceinline__ void wgmma(float (&)[N / 2], uint64_t, uint64_t) {
    __trap();  // not sm_90a: gemm_tc.cu never launches these tiles there
}
#endif

// ---- the kernel: a producer warp, mbarriers, two consumer warpgroups ----
//
// Warpgroup 0 is the producer: one thread requests both operands of a stage by TMA (cp.async.bulk.tensor, the
// tensor maps' 128-byte swizzle is the layout the descriptors name) against a "full" mbarrier per stage; the two
// consumer warpgroups (rows 0–63 and 64–127 of the tile) run the wgmma chain and release a stage on its "empty"
// mbarrier once the batch that read it is done. (Tried: two CTAs of a cluster sharing the weight tile by TMA
// multicast — −2…−10% at M ≤ 4096, ≤ +7% at 16384 on the H200; not kept.)

__device__ __forceinline__ void mbarInit(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbarExpectTx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbarWait(uint32_t bar, uint32_t parity) {
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}
__device__ __forceinline__ void mbarArrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/** A [box rows][64] tile at (k, row) of a 2-D tensor map into shared memory, counted on `bar`. */
__device__ __forceinline__ void tmaLoad(uint32_t dst, const CUtensorMap& map, int k, int row, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
            dst),
        "l"(reinterpret_cast<uint64_t>(&map)), "r"(k), "r"(row), "r"(bar)
        : "memory");
}

// ---- the end of every tile: finishing elements, and adding a split's parts across the cluster ----

/** y[m, n…n+3] = finishValue(v) for the columns inside the product, in one 16-byte store where y allows it. */
__device__ __forceinline__ void finishFour(const TcArgs& a, int64_t m, int n, float4 v) {
    float* yp = a.y + m * a.ldy + n;
    const bool vec = n + 3 < a.out && (a.ldy & 3) == 0 && (reinterpret_cast<uintptr_t>(a.y) & 15) == 0;
    const float e[4] = {v.x, v.y, v.z, v.w};
    float o[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)  // (columns past the edge are neither read nor written)
        o[i] = n + i >= a.out ? e[i] : finishValue(a, n + i, yp + i, e[i]);
    if (vec) {
        *reinterpret_cast<float4*>(yp) = make_float4(o[0], o[1], o[2], o[3]);
    } else {
        for (int i = 0; i < 4; ++i)
            if (n + i < a.out) yp[i] = o[i];
    }
}

/**
 * The parts of a split product, added in part order: every block of the cluster has left its part's raw sums for
 * one output tile at `mine` ([rows][ld] floats, the same offset in each block's shared memory); this block finishes
 * the tile rows [rowBegin, rowEnd) of `cols` columns (a multiple of 4) from n0, tile row r being row m0 + r of y.
 * Called by every thread of the block between two cluster barriers (the first makes the parts visible, the second
 * keeps every block's shared memory alive until its readers are done).
 */
__device__ __forceinline__ void finishParts(const TcArgs& a, const KSplit& split, const float* mine, int ld, int cols,
                                            int rowBegin, int rowEnd, int64_t m0, int n0) {
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    const int groups = cols / 4;
    for (int i = static_cast<int>(threadIdx.x); i < (rowEnd - rowBegin) * groups; i += static_cast<int>(blockDim.x)) {
        const int r = rowBegin + i / groups, c = (i % groups) * 4;
        const int64_t m = m0 + r;
        if (m >= a.rows || n0 + c >= a.out) continue;
        const float* at = mine + r * ld + c;  // rank p of the cluster = blockIdx.y = part p
        float4 v = *reinterpret_cast<const float4*>(cluster.map_shared_rank(at, 0));
        for (int p = 1; p < split.parts; ++p) {
            const float4 q = *reinterpret_cast<const float4*>(cluster.map_shared_rank(at, p));
            v.x += q.x;
            v.y += q.y;
            v.z += q.z;
            v.w += q.w;
        }
        finishFour(a, m, n0 + c, v);
    }
}

constexpr int kOutLd = 256 + 8;  // floats per staged output row: conflict-free 8-byte fragment stores
constexpr int kGroupM = 16;      // M tiles per group of the block order

struct TmaTile {
    static constexpr int kThreads = 384, BM = 128, BN = 256, BK = 64, S = 4;
    static constexpr uint32_t kABytes = BM * BK * 2, kBBytes = BN * BK * 2, kStageBytes = kABytes + kBBytes;
    static constexpr size_t kSmem = static_cast<size_t>(S) * kStageBytes + 2 * S * 8 + 1024;  // + barriers, align
    static_assert(static_cast<size_t>(BM) * kOutLd * 4 <= static_cast<size_t>(S) * kStageBytes, "output tile fits");
};

template <typename T>
__global__ void __launch_bounds__(384, 1)
    tmaTierKernel(const __grid_constant__ CUtensorMap mapX, const __grid_constant__ CUtensorMap mapW, TcArgs a,
                  int ntiles, KSplit split) {
    using L = TmaTile;
    constexpr int BK = L::BK, S = L::S, KK = BK / 16, NACC = L::BN / 2;
    extern __shared__ __align__(1024) unsigned char tc_smem[];
    const uint32_t base = (smemAddr(tc_smem) + 1023u) & ~1023u;
    const uint32_t fullBar = base + S * L::kStageBytes, emptyBar = fullBar + S * 8;
    const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x >> 7), 0);  // warp-uniform, visibly to ptxas
    // Grouped order: consecutive blocks walk kGroupM M tiles, then the next N tile, so the ~132 resident blocks
    // cover about 16 × 8 tiles and their operands stay in L2 (row-major order would stream all of x every wave).
    const int mt = static_cast<int>(gridDim.x) / ntiles, group = static_cast<int>(blockIdx.x) / (kGroupM * ntiles);
    const int firstM = group * kGroupM, groupM = min(kGroupM, mt - firstM);
    const int within = static_cast<int>(blockIdx.x) % (kGroupM * ntiles);
    const int64_t m0 = static_cast<int64_t>(firstM + within % groupM) * L::BM;
    const int n0 = (within / groupM) * L::BN;
    // This block's part of k (blockIdx.y; the whole of k without a split).
    const int kBegin = static_cast<int>(blockIdx.y) * split.part;
    const int kEnd = split.parts > 1 ? min(a.in, kBegin + split.part) : a.in;
    const int KT = (kEnd - kBegin + BK - 1) / BK;

    if (threadIdx.x == 0) {
        for (int s = 0; s < S; ++s) {
            mbarInit(fullBar + 8 * s, 1);   // the producer's arrive (+ the stage's bytes)
            mbarInit(emptyBar + 8 * s, 8);  // every consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the TMA unit
    }
    __syncthreads();

    if (wg == 0) {
        if (threadIdx.x == 0) {
            auto loadW = [&](int kt, int s) {
                tmaLoad(base + s * L::kStageBytes + L::kABytes, mapW, kBegin + kt * BK, n0, fullBar + 8 * s);
            };
            const int first = KT < S ? KT : S;
            for (int kt = 0; kt < first; ++kt) {  // weights first: they do not depend on the previous kernel
                mbarExpectTx(fullBar + 8 * kt, L::kStageBytes);
                loadW(kt, kt);
            }
            pdlWait();
            for (int kt = 0; kt < first; ++kt)
                tmaLoad(base + kt * L::kStageBytes, mapX, kBegin + kt * BK, static_cast<int>(m0), fullBar + 8 * kt);
            for (int kt = S; kt < KT; ++kt) {
                const int s = kt % S;
                mbarWait(emptyBar + 8 * s, ((kt / S) - 1) & 1);
                mbarExpectTx(fullBar + 8 * s, L::kStageBytes);
                loadW(kt, s);
                tmaLoad(base + s * L::kStageBytes, mapX, kBegin + kt * BK, static_cast<int>(m0), fullBar + 8 * s);
            }
        }
    } else {
        pdlWait();  // the epilogue reads bias and y and writes y
        pdlLaunchDependents();
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;  // warps 4–11
        const int cw = wg - 1;                                        // consumer warpgroup: rows 64·cw …
        float acc[NACC];
#pragma unroll
        for (int i = 0; i < NACC; ++i) acc[i] = 0.f;
        auto release = [&](int s) {
            __syncwarp();
            if (lane != 0) return;
            mbarArrive(emptyBar + 8 * s);
        };
        for (int kt = 0; kt < KT; ++kt) {
            const int s = kt % S;
            mbarWait(fullBar + 8 * s, (kt / S) & 1);
            const uint32_t sA = base + s * L::kStageBytes + cw * 64 * BK * 2, sB = base + s * L::kStageBytes + L::kABytes;
            const uint64_t da = swizzled128(sA), db = swizzled128(sB);
            const int chunks = min(KK, (kEnd - kBegin - kt * BK + 15) / 16);  // chunks past the part are skipped
            wgmmaFence();
            if (chunks == KK) {  // (a branch between wgmmas would make ptxas serialise them; this one is outside)
#pragma unroll
                for (int kk = 0; kk < KK; ++kk) wgmma<T, L::BN>(acc, da + 2 * kk, db + 2 * kk);  // + 32 bytes of k per step
            } else {
                for (int kk = 0; kk < chunks; ++kk) wgmma<T, L::BN>(acc, da + 2 * kk, db + 2 * kk);
            }
            wgmmaCommit();
            wgmmaWait<1>();  // the batch of tile kt − 1 is done: its stage may be refilled
            if (kt > 0) release((kt - 1) % S);
        }
        wgmmaWait<0>();
        pinRegisters(acc);
        // The epilogue goes through shared memory (the stages are free once both warpgroups are done with them),
        // so that y is written in whole 16-byte runs per thread and 512-byte runs per warp.
        asm volatile("bar.sync 1, 256;\n" ::: "memory");
        float* tile = reinterpret_cast<float*>(tc_smem + (base - smemAddr(tc_smem))) + cw * 64 * kOutLd;
        {
            const int rr = (warp & 3) * 16 + (lane >> 2), cc = (lane & 3) * 2;
#pragma unroll
            for (int j = 0; j < L::BN / 8; ++j) {
                *reinterpret_cast<float2*>(tile + rr * kOutLd + j * 8 + cc) = make_float2(acc[j * 4], acc[j * 4 + 1]);
                *reinterpret_cast<float2*>(tile + (rr + 8) * kOutLd + j * 8 + cc) =
                    make_float2(acc[j * 4 + 2], acc[j * 4 + 3]);
            }
        }
        asm volatile("bar.sync 1, 256;\n" ::: "memory");
        if (split.parts == 1) {  // y finished in place, 16-byte runs per thread, 512-byte runs per warp
            const int t = threadIdx.x & 127, c4 = (t & 63) * 4;
            for (int r = t >> 6; r < 64; r += 2) {
                const int64_t m = m0 + cw * 64 + r;
                if (m >= a.rows) break;
                if (n0 + c4 < a.out)
                    finishFour(a, m, n0 + c4, *reinterpret_cast<const float4*>(tile + r * kOutLd + c4));
            }
        }
    }
    if (split.parts > 1) {  // every thread of the cluster: the parts' tiles added in order, a slice of rows each
        namespace cg = cooperative_groups;
        pdlWait();  // (for the producer warpgroup's threads, which had not waited)
        cg::this_cluster().sync();
        const float* mine = reinterpret_cast<const float*>(tc_smem + (base - smemAddr(tc_smem)));
        const int rank = static_cast<int>(blockIdx.y);
        finishParts(a, split, mine, kOutLd, L::BN, L::BM * rank / split.parts, L::BM * (rank + 1) / split.parts, m0,
                    n0);
        cg::this_cluster().sync();
    }
}

// ---- the few-rows kernel: up to 64 rows, the weights streamed through a TMA ring ----
//
// Batched decode (M ≤ 64) is bound by reading W once: one consumer warpgroup per block (64 rows × BN columns,
// wgmma m64nBNk16), a producer warp keeping S stages in flight, BN = 32 or 64 so that the grid has about a block per
// SM or more, two blocks per SM. Only the rows of x that exist are loaded (rounded up to 8); the rows of a stage's A
// tile past them hold whatever an earlier stage left, which reaches only output rows that are never stored (an
// output row of an MMA depends on its own A row alone). Tried and lost (2026-12-02): the x parts of all stages
// packed side by side so that twice the stages fit — 1.4–1.6× slower.

template <int BN, int S, bool F32X>
struct FewRowsTile {
    static constexpr int kThreads = 160, BM = 64, BK = 64;
    static constexpr int kF32xMaxRows = 16;  // the f32-x variant's x staging holds this many rows
    static constexpr uint32_t kABytes = BM * BK * 2, kBBytes = BN * BK * 2;
    static constexpr uint32_t kXsBytes = F32X ? kF32xMaxRows * BK * 4 : 0;  // f32 x as TMA lands it
    static constexpr uint32_t kStageBytes = kABytes + kBBytes + kXsBytes;
    static constexpr size_t kSmem = static_cast<size_t>(S) * kStageBytes + 2 * S * 8 + 1024;
};

/**
 * F32X: x is read as f32 straight from the caller's rows (≤ 16) — no packing launch before the product — and the
 * consumer warpgroup rounds each stage's rows to T into the swizzled A tile itself (packPair: round to nearest even,
 * as rowsToLowp rounds, so the tensor cores see the same values as the packed variant's).
 */
template <typename T, int BN, int S, bool F32X>
__global__ void __launch_bounds__(160, 2) fewRowsTierKernel(const __grid_constant__ CUtensorMap mapX,
                                                           const __grid_constant__ CUtensorMap mapW, TcArgs a,
                                                           uint32_t xBytes, int xrows, KSplit split) {
    using L = FewRowsTile<BN, S, F32X>;
    constexpr int BK = L::BK, KK = BK / 16, NACC = BN / 2;
    extern __shared__ __align__(1024) unsigned char tc_smem[];
    const uint32_t base = (smemAddr(tc_smem) + 1023u) & ~1023u;
    unsigned char* const gbase = tc_smem + (base - smemAddr(tc_smem));  // the same bytes, generic address
    const uint32_t fullBar = base + S * L::kStageBytes, emptyBar = fullBar + S * 8;
    const int warp = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x >> 5), 0);
    const int n0 = blockIdx.x * BN;
    const int kBegin = static_cast<int>(blockIdx.y) * split.part;  // this block's part of k
    const int kEnd = split.parts > 1 ? min(a.in, kBegin + split.part) : a.in;
    const int KT = (kEnd - kBegin + BK - 1) / BK;
    // Where TMA puts a stage's x: the A tile itself (16-bit x), or the f32 staging after the weights (F32X).
    constexpr uint32_t kXOffset = F32X ? L::kABytes + L::kBBytes : 0;

    if (threadIdx.x == 0) {
        for (int s = 0; s < S; ++s) {
            mbarInit(fullBar + 8 * s, 1);
            mbarInit(emptyBar + 8 * s, 4);  // the consumer warps
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    const int lane = threadIdx.x & 31;
    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.f;
    if (warp == 4) {
        if ((threadIdx.x & 31) == 0) {
            const int first = KT < S ? KT : S;
            for (int kt = 0; kt < first; ++kt) {  // weights first: they do not depend on the previous kernel
                mbarExpectTx(fullBar + 8 * kt, xBytes + L::kBBytes);
                tmaLoad(base + kt * L::kStageBytes + L::kABytes, mapW, kBegin + kt * BK, n0, fullBar + 8 * kt);
            }
            pdlWait();
            for (int kt = 0; kt < first; ++kt)
                tmaLoad(base + kt * L::kStageBytes + kXOffset, mapX, kBegin + kt * BK, 0, fullBar + 8 * kt);
            for (int kt = S; kt < KT; ++kt) {
                const int s = kt % S;
                mbarWait(emptyBar + 8 * s, ((kt / S) - 1) & 1);
                mbarExpectTx(fullBar + 8 * s, xBytes + L::kBBytes);
                tmaLoad(base + s * L::kStageBytes + L::kABytes, mapW, kBegin + kt * BK, n0, fullBar + 8 * s);
                tmaLoad(base + s * L::kStageBytes + kXOffset, mapX, kBegin + kt * BK, 0, fullBar + 8 * s);
            }
        }
    } else {
        pdlWait();
        pdlLaunchDependents();
        for (int kt = 0; kt < KT; ++kt) {
            const int s = kt % S;
            mbarWait(fullBar + 8 * s, (kt / S) & 1);
            if (F32X) {  // one 16-byte chunk of the A tile per thread: row r, k chunk c, at chunk position c ^ (r & 7)
                const int t = threadIdx.x, r = t >> 3, c = t & 7;
                if (r < xrows) {
                    const float* src = reinterpret_cast<const float*>(gbase + s * L::kStageBytes + kXOffset) + r * BK + c * 8;
                    const float4 v0 = *reinterpret_cast<const float4*>(src), v1 = *reinterpret_cast<const float4*>(src + 4);
                    const uint4 packed = make_uint4(packPair<T>(v0.x, v0.y), packPair<T>(v0.z, v0.w),
                                                    packPair<T>(v1.x, v1.y), packPair<T>(v1.z, v1.w));
                    *reinterpret_cast<uint4*>(gbase + s * L::kStageBytes + r * (BK * 2) + ((c ^ (r & 7)) << 4)) = packed;
                }
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic-proxy writes, wgmma reads
                asm volatile("bar.sync 1, 128;\n" ::: "memory");                 // the consumer warpgroup only
            }
            const uint64_t da = swizzled128(base + s * L::kStageBytes);
            const uint64_t db = swizzled128(base + s * L::kStageBytes + L::kABytes);
            const int chunks = min(KK, (kEnd - kBegin - kt * BK + 15) / 16);
            wgmmaFence();
            if (chunks == KK) {
#pragma unroll
                for (int kk = 0; kk < KK; ++kk) wgmma<T, BN>(acc, da + 2 * kk, db + 2 * kk);
            } else {
                for (int kk = 0; kk < chunks; ++kk) wgmma<T, BN>(acc, da + 2 * kk, db + 2 * kk);
            }
            wgmmaCommit();
            wgmmaWait<1>();
            if (kt > 0) {
                __syncwarp();
                if (lane == 0) mbarArrive(emptyBar + 8 * ((kt - 1) % S));
            }
        }
        wgmmaWait<0>();
        pinRegisters(acc);
    }
    // Fragment element e of column group j: row warp·16 + lane/4 (+ 8 for e ≥ 2), column 2·(lane % 4) + e % 2.
    const int r0 = warp * 16 + (lane >> 2), c0 = (lane & 3) * 2;
    if (split.parts == 1) {
        if (warp == 4) return;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int64_t m = r0 + (e >> 1) * 8;
                const int n = n0 + c0 + j * 8 + (e & 1);
                if (m < a.rows && n < a.out) finishElement(a, m, n, acc[j * 4 + e]);
            }
        return;
    }
    // A split: this part's raw sums into the (now idle) stage memory as [64][kPartLd], then added across the
    // cluster in part order, each block finishing a slice of the rows.
    constexpr int kPartLd = BN + 4;
    float* mine = reinterpret_cast<float*>(gbase);
    if (warp < 4) {
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = r0 + (e >> 1) * 8;
                if (r < a.rows) mine[r * kPartLd + c0 + j * 8 + (e & 1)] = acc[j * 4 + e];
            }
    }
    namespace cg = cooperative_groups;
    pdlWait();  // (for the producer warp, which waited in one lane only)
    cg::this_cluster().sync();
    const int rows = static_cast<int>(a.rows), rank = static_cast<int>(blockIdx.y);
    finishParts(a, split, mine, kPartLd, BN, rows * rank / split.parts, rows * (rank + 1) / split.parts, 0, n0);
    cg::this_cluster().sync();
}

/** cuTensorMapEncodeTiled from the driver (through the runtime: libmamba links no libcuda). */
PFN_cuTensorMapEncodeTiled_v12000 tensorMapEncoder() {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void* p = nullptr;
        cudaDriverEntryPointQueryResult q{};
        check(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q),
              "cudaGetDriverEntryPointByVersion (cuTensorMapEncodeTiled)");
        if (q != cudaDriverEntryPointSuccess || !p) throw std::runtime_error("the CUDA driver has no cuTensorMapEncodeTiled");
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }();
    return fn;
}

/**
 * A row-major [rows][inner] matrix (row stride `ld` elements of `elemBytes`) as boxes of [boxRows][64], zeros past its
 * edges: 16-bit operands in the 128-byte swizzle that the wgmma descriptors name, f32 x unswizzled.
 */
CUtensorMap tensorMap(const void* base, CUtensorMapDataType type, int elemBytes, int64_t inner, int64_t rows, int64_t ld,
                      int boxRows, CUtensorMapSwizzle swizzle) {
    CUtensorMap m;
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(rows)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * elemBytes};
    const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(boxRows)}, step[2] = {1, 1};
    const CUresult r = tensorMapEncoder()(&m, type, 2, const_cast<void*>(base), dims, strides, box, step,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) throw std::runtime_error("cuTensorMapEncodeTiled failed: CUresult " + std::to_string(r));
    return m;
}

/** A 16-bit operand [rows][inner] (ld = inner) in the 128-byte swizzle. */
CUtensorMap tensorMap16(const void* base, bool bf16, int64_t inner, int64_t rows, int boxRows) {
    return tensorMap(base, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, inner, rows,
                     inner, boxRows, CU_TENSOR_MAP_SWIZZLE_128B);
}

/** The grid's y extent and the cluster: one block per part of k, the parts of a tile in one cluster. */
dim3 partsCluster(const KSplit& split) {
    if (split.parts < 1 || split.parts > 8) throw std::logic_error("gemm (tensor-core tier): 1 to 8 parts of k");
    return dim3(1, static_cast<unsigned>(split.parts), 1);
}

template <typename T>
void launchTma(const Exec& ex, const TcArgs& a, const void* xp, const KSplit& split) {
    using L = TmaTile;
    const bool bf16 = std::is_same<T, __nv_bfloat16>::value;
    const auto kernel = tmaTierKernel<T>;
    if (L::kSmem > static_cast<size_t>(ex.smem_optin))
        throw std::runtime_error("gemm (tensor-core tier, TMA): a tile needs " + std::to_string(L::kSmem) +
                                 " bytes of shared memory; the device offers " + std::to_string(ex.smem_optin));
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(L::kSmem)),
          "cudaFuncSetAttribute (TMA tier shared memory)");
    const CUtensorMap mapX = tensorMap16(xp, bf16, a.in, a.rows, L::BM);
    const CUtensorMap mapW = tensorMap16(a.w, bf16, a.in, a.out, L::BN);
    const unsigned mt = blocksFor(a.rows, L::BM), nt = blocksFor(a.out, L::BN);
    if (static_cast<uint64_t>(mt) * nt > 0x7fffffffu) throw std::runtime_error("gemm (tensor-core tier, TMA): too many tiles");
    const dim3 cluster = partsCluster(split);
    launchClustered("gemm (tensor-core tier, TMA)", ex, kernel, dim3(mt * nt, cluster.y), dim3(L::kThreads), L::kSmem,
                    cluster, mapX, mapW, a, static_cast<int>(nt), split);
}

template <typename T, int BN, int S, bool F32X>
void launchFewRows(const Exec& ex, const TcArgs& a, const void* xp, const KSplit& split) {
    using L = FewRowsTile<BN, S, F32X>;
    const bool bf16 = std::is_same<T, __nv_bfloat16>::value;
    const auto kernel = fewRowsTierKernel<T, BN, S, F32X>;
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(L::kSmem)),
          "cudaFuncSetAttribute (few-rows tier shared memory)");
    const int xrows = static_cast<int>((a.rows + 7) / 8 * 8);
    if (F32X && xrows > L::kF32xMaxRows)
        throw std::logic_error("gemm (tensor-core tier): the f32-x few-rows tile takes ≤ 16 rows");
    const CUtensorMap mapX = F32X ? tensorMap(a.x, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, a.in, a.rows, a.ldx, xrows,
                                              CU_TENSOR_MAP_SWIZZLE_NONE)
                                  : tensorMap16(xp, bf16, a.in, a.rows, xrows);
    const CUtensorMap mapW = tensorMap16(a.w, bf16, a.in, a.out, BN);
    const dim3 cluster = partsCluster(split);
    launchClustered("gemm (tensor-core tier, few rows)", ex, kernel, dim3(blocksFor(a.out, BN), cluster.y),
                    dim3(L::kThreads), L::kSmem, cluster, mapX, mapW, a,
                    static_cast<uint32_t>(xrows * L::BK * (F32X ? 4 : 2)), xrows, split);
}

/** Whether the few-rows tile's 64-column blocks (one per part of k) reach a block per SM. */
bool wide(const Exec& ex, const TcArgs& a, const KSplit& split) {
    return static_cast<int64_t>(blocksFor(a.out, 64)) * split.parts >= ex.sms;
}

template <typename T>
void launchWgTile(const Exec& ex, const TcArgs& a, const void* xp, TcTile tile, const KSplit& split) {
    switch (tile) {
        case TcTile::kTma128x256: launchTma<T>(ex, a, xp, split); break;
        case TcTile::kFewRows:  // BN from the width and the parts: 64 once those blocks fill the GPU, else 32
            if (a.rows > 64) throw std::logic_error("gemm (tensor-core tier): the few-rows tile takes ≤ 64 rows");
            if (wide(ex, a, split)) launchFewRows<T, 64, 6, false>(ex, a, xp, split);
            else launchFewRows<T, 32, 8, false>(ex, a, xp, split);
            break;
        case TcTile::kFewRowsF32x:  // the same with f32 x read directly (≤ 16 rows; fewer stages fit)
            if (wide(ex, a, split)) launchFewRows<T, 64, 5, true>(ex, a, nullptr, split);
            else launchFewRows<T, 32, 6, true>(ex, a, nullptr, split);
            break;
        default: throw std::logic_error("gemm (tensor-core tier): not a wgmma tile");
    }
}

}  // namespace

void launchWgmmaTile(const Exec& ex, const TcArgs& a, const void* xp, int wdtype, TcTile tile, KSplit split) {
    if (ex.cc != 90) throw std::logic_error("gemm (tensor-core tier): wgmma tiles need a compute-capability 9.0 device");
    if (wdtype == DTYPE_BF16) launchWgTile<__nv_bfloat16>(ex, a, xp, tile, split);
    else launchWgTile<__half>(ex, a, xp, tile, split);
}

}  // namespace mamba::cuda
