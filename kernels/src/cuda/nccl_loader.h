// NCCL loaded at run time (dlopen of libnccl.so.2), with our own declarations of the few entry points the
// data-parallel communicator calls: the build machines have no NCCL, and a libmamba without a hard NCCL
// dependency loads on any machine. Values below are NCCL 2's (nccl.h; stable across 2.x).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace mamba::cuda {

using ncclComm = void*;

constexpr int kNcclUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
struct NcclUniqueId {                    // ncclUniqueId: passed by value to ncclCommInitRank
    char internal[kNcclUniqueIdBytes];
};

enum : int {
    kNcclSuccess = 0,
    kNcclInProgress = 7,  // ncclResult_t
    kNcclFloat32 = 7,
    kNcclFloat64 = 8,     // ncclDataType_t
    kNcclSum = 0,         // ncclRedOp_t
};

struct NcclApi {
    std::string library;  // the file that was loaded
    int (*getUniqueId)(NcclUniqueId* id);
    int (*commInitRank)(ncclComm* comm, int nranks, NcclUniqueId id, int rank);
    int (*commDestroy)(ncclComm comm);
    int (*commAbort)(ncclComm comm);
    int (*commGetAsyncError)(ncclComm comm, int* asyncError);
    int (*allGather)(const void* send, void* recv, size_t sendCount, int dataType, ncclComm comm, cudaStream_t stream);
    int (*allReduce)(const void* send, void* recv, size_t count, int dataType, int op, ncclComm comm,
                     cudaStream_t stream);
    int (*broadcast)(const void* send, void* recv, size_t count, int dataType, int root, ncclComm comm,
                     cudaStream_t stream);
    const char* (*errorString)(int result);
};

/** Loads libnccl.so.2 once per process; throws std::runtime_error naming the library and the fix if it does not load. */
const NcclApi& nccl();

/** Throws std::runtime_error("<what> failed: <NCCL's words> (ncclResult_t n)") unless result is success. */
void checkNccl(int result, const char* what);

}  // namespace mamba::cuda
