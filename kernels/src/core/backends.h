// Where backends come from. Each model (with its states and trainer) opens its own backend, so two models
// never share mutable device state: a CUDA backend is a context of its own (stream, cuBLAS handle,
// workspaces, staging). The CPU backend keeps no per-call state and is shared; its thread pool and
// OpenBLAS are safe for concurrent callers.
#pragma once

#include "ops/ops.h"

#include <memory>

namespace mamba {

/** True when libmamba was compiled with CUDA support. */
bool builtWithCuda();

/** The CPU backend (shared, stateless). */
std::shared_ptr<Ops> cpuBackend();

/**
 * A new CUDA backend context on a device. Cheap to create: the cuBLAS handle and workspaces are made on
 * first use. Throws std::runtime_error("no CUDA device …") when CUDA is unusable, std::out_of_range for a
 * missing ordinal.
 */
std::shared_ptr<Ops> newCudaBackend(int ordinal);

/**
 * Page-locked host memory for transfers to CUDA device `ordinal` (valid for every context), or null when the driver
 * refuses it or libmamba has no CUDA. Throws as newCudaBackend does for a missing device. Freed by freePinnedHost.
 */
void* allocPinnedHost(int ordinal, size_t bytes);
void freePinnedHost(void* p) noexcept;

/** DEVICE_CPU → the CPU backend; an ordinal ≥ 0 → a new CUDA context. */
inline std::shared_ptr<Ops> openBackend(int device) {
    return device == DEVICE_CPU ? cpuBackend() : newCudaBackend(device);
}

}  // namespace mamba
