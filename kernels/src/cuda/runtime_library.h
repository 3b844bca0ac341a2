// A shared library opened at run time (dlopen) and its entry points bound by name: how cuBLAS and NCCL are loaded,
// so that libmamba has no hard dependency on either and loads on machines without them.
#pragma once

#include <dlfcn.h>

#include <mutex>
#include <stdexcept>
#include <string>

namespace mamba::cuda {

/** Binds `symbol` of `lib` (opened from `file`) to fn; throws naming `what` (e.g. "cuBLAS") when it is missing. */
template <typename F>
void bindSymbol(void* lib, const char* what, const std::string& file, const char* symbol, F*& fn) {
    fn = reinterpret_cast<F*>(dlsym(lib, symbol));
    if (!fn) throw std::runtime_error(std::string(what) + ": " + file + " has no symbol " + symbol);
}

/** The table `load()` returns, loaded once per process; a throw leaves it unloaded, so the next call retries. */
template <typename Api, typename Load>
const Api& loadOnce(Load load) {
    static Api api;
    static std::once_flag once;
    std::call_once(once, [&] { api = load(); });
    return api;
}

}  // namespace mamba::cuda
