// The device side of data-parallel training: one rank of a communicator whose collectives work on device
// memory (NCCL, cuda/nccl_collective.cu). A libmamba built without CUDA has none (cpu/no_cuda.cpp says why);
// on the CPU the communicators are Java (org.mamba4j.parallel), over host arrays.
#pragma once

#include "mamba/mamba.h"
#include "ops/ops.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mamba {

/** Device memory holding `n` gradients (a trainer's flat buffers; alignment padding is zero and stays zero). */
struct DeviceSpan {
    float* data;
    int64_t n;
};

constexpr int kCollectiveIdBytes = 128;  // an NCCL unique id

class Collective {
public:
    virtual ~Collective() = default;
    /**
     * Replaces every span (memory of `ops`, a context on this rank's device) by its sum over the ranks, on
     * `ops`'s stream after the work already queued there; returns when it is done. rankOrder: all-gather then
     * ((g0 + g1) + g2) + … per element; otherwise one all-reduce.
     */
    virtual void sumGradients(Ops& ops, const std::vector<DeviceSpan>& spans, bool rankOrder) = 0;
    /** gathered[r·n + i] = rank r's local[i] (host arrays). */
    virtual void allGather(const double* local, int64_t n, double* gathered) = 0;
    /** Root's host data into every rank's. */
    virtual void broadcast(float* host, int64_t n, int root) = 0;
    virtual void abort() noexcept = 0;
};

/** "" when NCCL is usable here, else why not (no CUDA in this build, libnccl.so.2 missing). Never throws. */
std::string ncclUnavailable();
/** A fresh NCCL unique id (kCollectiveIdBytes bytes). */
void newNcclId(signed char* dst);
/** Joins the clique of `id` as `rank` on CUDA device `device`; blocks until every rank joined. */
std::unique_ptr<Collective> newNcclCollective(const signed char* id, int worldSize, int rank, int device,
                                              int64_t timeoutMillis);

/** The state behind mamba::NcclComm (api/collective_api.cpp; sumGradients is in api/trainer_api.cpp, next to the trainer). */
class NcclComm::Impl {
public:
    std::unique_ptr<Collective> collective;
    int world = 0, rank = 0, device = 0;
};

}  // namespace mamba
