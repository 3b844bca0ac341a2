// Backward of the token embedding: dtable[ids[r], :] += dx[r, :], deterministic and without atomics.
//
// 1. (id, row) pairs sorted by id with cub's radix sort, which is stable: the rows of one id stay in row order.
// 2. One block per (sorted position, column tile); only the block at the first position of an id's run
//    works: each thread walks the run in row order for its column, adding into the table row. That is the
//    CPU backend's loop (same additions in the same order), so both give the same bits.
// The workspace (scratch slot 6) holds the row indices, the sorted pairs and cub's temporary storage.
#include "train_kernels.h"

#include <cub/device/device_radix_sort.cuh>

#include <stdexcept>
#include <string>

namespace mamba::cuda::train {
namespace {

constexpr int kEmbedThreads = 128;
constexpr int kEmbedTile = 512;  // columns per block (4 per thread)

__global__ void iotaKernel(int32_t* __restrict__ v, int64_t n) {
    pdlWait();
    pdlLaunchDependents();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        v[i] = static_cast<int32_t>(i);
}

__global__ void embedBackwardKernel(const float* __restrict__ dx, int64_t ldx, const uint32_t* __restrict__ keys,
                                    const int32_t* __restrict__ rows, int64_t n, int d, float* __restrict__ dtable) {
    pdlWait();
    pdlLaunchDependents();
    const int64_t i = blockIdx.x;
    const uint32_t id = keys[i];
    if (i > 0 && keys[i - 1] == id) return;  // not the start of a run
    float* dst = dtable + static_cast<int64_t>(id) * d;
    const int c0 = blockIdx.y * kEmbedTile;
    const int c1 = min(d, c0 + kEmbedTile);
    for (int c = c0 + threadIdx.x; c < c1; c += blockDim.x) {
        float acc = dst[c];
        for (int64_t j = i; j < n && keys[j] == id; ++j) acc = __fadd_rn(acc, dx[static_cast<int64_t>(rows[j]) * ldx + c]);
        dst[c] = acc;
    }
}

int64_t alignFloats(int64_t n) { return (n + 63) / 64 * 64; }  // 256-byte pieces

}  // namespace

void embedBackward(const Exec& ex, const EmbedBackwardArgs& a, const Scratch& scratch) {
    const int64_t n = a.rows;
    if (n <= 0 || a.d <= 0) return;
    if (n > 0x7fffffff) throw std::invalid_argument("embedBackward: " + std::to_string(n) + " rows exceed 2^31 - 1");
    if (a.vocab < 1) throw std::invalid_argument("embedBackward: vocab = " + std::to_string(a.vocab) + " must be >= 1");
    int bits = 1;  // the key bits that can differ: ids are in [0, vocab)
    while (bits < 31 && (int64_t{1} << bits) < a.vocab) ++bits;
    const int count = static_cast<int>(n);
    size_t temp_bytes = 0;
    check(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, static_cast<const uint32_t*>(nullptr),
                                          static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                          static_cast<int32_t*>(nullptr), count, 0, bits, ex.stream),
          "embedBackward: cub sort size");
    const int64_t piece = alignFloats(n);
    float* ws = scratch.get(6, 3 * piece + alignFloats(static_cast<int64_t>((temp_bytes + 3) / 4)) + 64);
    int32_t* rows_in = reinterpret_cast<int32_t*>(ws);
    uint32_t* keys_out = reinterpret_cast<uint32_t*>(ws + piece);
    int32_t* rows_out = reinterpret_cast<int32_t*>(ws + 2 * piece);
    void* temp = ws + 3 * piece;

    launch("embedBackward.iota", ex, iotaKernel, dim3(static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096))),
           dim3(256), 0, rows_in, n);
    check(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, reinterpret_cast<const uint32_t*>(a.ids), keys_out, rows_in,
                                          rows_out, count, 0, bits, ex.stream),
          "embedBackward: cub sort");
    const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>((a.d + kEmbedTile - 1) / kEmbedTile));
    launch("embedBackward", ex, embedBackwardKernel, grid, dim3(kEmbedThreads), 0, a.dx, a.ldx,
           static_cast<const uint32_t*>(keys_out), static_cast<const int32_t*>(rows_out), n, a.d, a.dtable);
}

}  // namespace mamba::cuda::train
