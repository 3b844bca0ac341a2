#include "nccl_loader.h"

#include <dlfcn.h>

#include <mutex>
#include <stdexcept>

namespace mamba::cuda {
namespace {

template <typename F>
void bind(void* lib, const std::string& file, const char* symbol, F*& fn) {
    fn = reinterpret_cast<F*>(dlsym(lib, symbol));
    if (!fn) throw std::runtime_error("NCCL: " + file + " has no symbol " + symbol);
}

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
    bind(lib, api.library, "ncclGetUniqueId", api.getUniqueId);
    bind(lib, api.library, "ncclCommInitRank", api.commInitRank);
    bind(lib, api.library, "ncclCommDestroy", api.commDestroy);
    bind(lib, api.library, "ncclCommAbort", api.commAbort);
    bind(lib, api.library, "ncclCommGetAsyncError", api.commGetAsyncError);
    bind(lib, api.library, "ncclAllGather", api.allGather);
    bind(lib, api.library, "ncclAllReduce", api.allReduce);
    bind(lib, api.library, "ncclBroadcast", api.broadcast);
    bind(lib, api.library, "ncclGetErrorString", api.errorString);
    return api;  // the library stays loaded for the life of the process
}

}  // namespace

const NcclApi& nccl() {
    static NcclApi api;
    static std::once_flag once;
    std::call_once(once, [] { api = load(); });  // a throw leaves the flag unset: the next call retries
    return api;
}

void checkNccl(int result, const char* what) {
    if (result == kNcclSuccess) return;
    const char* words = nccl().errorString ? nccl().errorString(result) : nullptr;
    throw std::runtime_error(std::string(what) + " failed: " + (words ? words : "NCCL error") + " (ncclResult_t " +
                             std::to_string(result) + ")");
}

}  // namespace mamba::cuda
