#include "nccl_loader.h"

#include "runtime_library.h"

#include <stdexcept>

namespace mamba::cuda {
namespace {

NcclApi load() {
    NcclApi api{};
    api.library = "libnccl.so.2";
    void* lib = dlopen(api.library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char* e = dlerror();
        throw std::runtime_error(
            std::string("NCCL was not found: data-parallel training on CUDA loads libnccl.so.2 at run time (") +
            (e ? e : "dlopen failed") +
            "). Fix: install NCCL 2 (NVIDIA's libnccl2 package, or the nvidia-nccl wheel) and put its lib folder on "
            "LD_LIBRARY_PATH; on the CPU use the in-process or TCP communicator (docs/data-parallel.md)");
    }
    bindSymbol(lib, "NCCL", api.library, "ncclGetUniqueId", api.getUniqueId);
    bindSymbol(lib, "NCCL", api.library, "ncclCommInitRank", api.commInitRank);
    bindSymbol(lib, "NCCL", api.library, "ncclCommDestroy", api.commDestroy);
    bindSymbol(lib, "NCCL", api.library, "ncclCommAbort", api.commAbort);
    bindSymbol(lib, "NCCL", api.library, "ncclCommGetAsyncError", api.commGetAsyncError);
    bindSymbol(lib, "NCCL", api.library, "ncclAllGather", api.allGather);
    bindSymbol(lib, "NCCL", api.library, "ncclAllReduce", api.allReduce);
    bindSymbol(lib, "NCCL", api.library, "ncclBroadcast", api.broadcast);
    bindSymbol(lib, "NCCL", api.library, "ncclGetErrorString", api.errorString);
    return api;  // the library stays loaded for the life of the process
}

}  // namespace

const NcclApi& nccl() {
    return loadOnce<NcclApi>(load);
}

void checkNccl(int result, const char* what) {
    if (result == kNcclSuccess) return;
    const char* words = nccl().errorString ? nccl().errorString(result) : nullptr;
    throw std::runtime_error(std::string(what) + " failed: " + (words ? words : "NCCL error") + " (ncclResult_t " +
                             std::to_string(result) + ")");
}

}  // namespace mamba::cuda
