// One rank of an NCCL communicator (runtime/collective.h). Gradients are summed in the trainer's own device
// buffers, on its context's stream, so the exchange is ordered after the backward that produced them.
//
// Rank order (the deterministic definition, docs/data-parallel.md): ncclAllGather of every rank's gradient in
// buckets, then Ops::sumRanks (rank_sum.cu) adds the ranks' copies per element in rank order, ((g0 + g1) + g2) + …,
// with no atomics and no tree: every rank computes the same bits, and so does the host fold of the CPU communicators.
// Otherwise: ncclAllReduce in place (NCCL's ring/tree order: reproducible on one topology, not equal to a fold).
//
// Every collective is waited for with a deadline: a dead or hung peer leaves NCCL's kernel spinning, so we poll
// the stream and ncclCommGetAsyncError, and past the deadline abort the communicator (which ends the kernel)
// and throw. NCCL then cannot be used again by this rank; the process is expected to exit.
#include "core/backends.h"
#include "core/buffer.h"
#include "cuda_backend.h"
#include "cuda_check.h"
#include "nccl_loader.h"
#include "runtime/collective.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

namespace mamba::cuda {
namespace {

/** Restores the calling thread's current device on exit (NCCL and our scratch work on `device`). */
class OnDevice {
public:
    explicit OnDevice(int device) {
        if (cudaGetDevice(&prev_) != cudaSuccess) prev_ = -1;
        check(cudaSetDevice(device), "cudaSetDevice");
    }
    ~OnDevice() {
        if (prev_ >= 0) cudaSetDevice(prev_);
        cudaGetLastError();
    }

private:
    int prev_ = -1;
};

class NcclCollective final : public Collective {
public:
    NcclCollective(const signed char* id, int world, int rank, int device, int64_t timeoutMillis)
        : world_(world), rank_(rank), device_(device), timeout_ms_(timeoutMillis) {
        const NcclApi& api = nccl();
        own_ = newCudaBackend(device);  // our context: stream for host-array collectives, scratch allocations
        OnDevice on(device);
        NcclUniqueId uid;
        std::memcpy(uid.internal, id, kNcclUniqueIdBytes);
        checkNccl(api.commInitRank(&comm_, world, uid, rank), "ncclCommInitRank");
    }

    ~NcclCollective() override {
        if (comm_) {
            OnDevice on(device_);
            if (aborted_)
                nccl().commAbort(comm_);
            else
                nccl().commDestroy(comm_);
        }
    }

    void sumGradients(Ops& ops, const std::vector<DeviceSpan>& spans, bool rankOrder) override {
        requireUsable();
        auto* be = dynamic_cast<CudaBackend*>(&ops);
        if (!be || be->ordinal() != device_)
            throw std::invalid_argument("invalid argument: the trainer is not on this communicator's device cuda:" +
                                        std::to_string(device_));
        OnDevice on(device_);
        const cudaStream_t s = be->stream();
        // A bucket bounds the gather buffer to kGatherFloats whatever the model size.
        int64_t largest = 0;
        for (const DeviceSpan& span : spans) largest = std::max(largest, span.n);
        const int64_t bucket = std::min(largest, std::max<int64_t>(1, kGatherFloats / world_));
        if (rankOrder && world_ > 1 && bucket > 0) gather_.ensure(*own_, bucket * world_);
        for (const DeviceSpan& span : spans) {
            if (span.n == 0) continue;
            if (!rankOrder || world_ == 1) {
                checkNccl(nccl().allReduce(span.data, span.data, static_cast<size_t>(span.n), kNcclFloat32, kNcclSum,
                                           comm_, s),
                          "ncclAllReduce");
                continue;
            }
            for (int64_t off = 0; off < span.n; off += bucket) {
                const int64_t n = std::min(bucket, span.n - off);
                checkNccl(nccl().allGather(span.data + off, gather_.data(), static_cast<size_t>(n), kNcclFloat32,
                                           comm_, s),
                          "ncclAllGather");
                be->sumRanks(gather_.data(), world_, n, span.data + off);  // on the same stream, after the gather
            }
        }
        waitFor(s, "the gradient exchange");
    }

    void allGather(const double* local, int64_t n, double* gathered) override {
        requireUsable();
        OnDevice on(device_);
        // doubles staged as float pairs in our f32 scratch (bits copied, not converted)
        scratch_.ensure(*own_, 2 * n * (world_ + 1));
        float* send = scratch_.data();
        float* recv = scratch_.data() + 2 * n;
        own_->upload(send, reinterpret_cast<const float*>(local), 2 * n);
        checkNccl(nccl().allGather(send, recv, static_cast<size_t>(n), kNcclFloat64, comm_, ownStream()),
                  "ncclAllGather");
        waitFor(ownStream(), "an all-gather");
        own_->download(reinterpret_cast<float*>(gathered), recv, 2 * n * world_);
    }

    void broadcast(float* host, int64_t n, int root) override {
        requireUsable();
        OnDevice on(device_);
        scratch_.ensure(*own_, n);
        own_->upload(scratch_.data(), host, n);
        checkNccl(nccl().broadcast(scratch_.data(), scratch_.data(), static_cast<size_t>(n), kNcclFloat32, root, comm_,
                                   ownStream()),
                  "ncclBroadcast");
        waitFor(ownStream(), "a broadcast");
        own_->download(host, scratch_.data(), n);
    }

    void abort() noexcept override {
        if (!comm_ || aborted_) return;
        aborted_ = true;
        OnDevice on(device_);
        nccl().commAbort(comm_);
        comm_ = nullptr;
    }

private:
    static constexpr int64_t kGatherFloats = int64_t{1} << 26;  // 256 MiB of gathered gradients at most

    cudaStream_t ownStream() const { return static_cast<CudaBackend&>(*own_).stream(); }

    void requireUsable() const {
        if (aborted_)
            throw std::logic_error("illegal state: the NCCL communicator was aborted (an earlier collective failed or "
                                   "timed out); it cannot be used again");
    }

    /** Polls until the stream's work is done; a NCCL error or the deadline aborts the communicator and throws. */
    void waitFor(cudaStream_t s, const char* what) {
        const auto start = std::chrono::steady_clock::now();
        const auto deadline = start + std::chrono::milliseconds(timeout_ms_);
        for (int spins = 0;; ++spins) {
            const cudaError_t e = cudaStreamQuery(s);
            if (e == cudaSuccess) return;
            if (e != cudaErrorNotReady) throwCuda(e, std::string("waiting for ") + what);
            int async = kNcclSuccess;
            nccl().commGetAsyncError(comm_, &async);
            if (async != kNcclSuccess && async != kNcclInProgress) {
                const char* words = nccl().errorString(async);
                abort();
                throw std::runtime_error(std::string(what) + " failed on rank " + std::to_string(rank_) + ": " +
                                         (words ? words : "NCCL error") + " (a peer failed; the communicator was aborted)");
            }
            if (std::chrono::steady_clock::now() > deadline) {
                abort();
                throw std::runtime_error(std::string(what) + " on rank " + std::to_string(rank_) + " of " +
                                         std::to_string(world_) + " timed out after " + std::to_string(timeout_ms_) +
                                         " ms: a peer is dead or hung (the NCCL communicator was aborted)");
            }
            if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
    }

    const int world_, rank_, device_;
    const int64_t timeout_ms_;
    std::shared_ptr<Ops> own_;  // declared before the buffers that live in it
    Buffer gather_, scratch_;
    ncclComm comm_ = nullptr;
    bool aborted_ = false;
};

}  // namespace
}  // namespace mamba::cuda

namespace mamba {

std::string ncclUnavailable() {
    try {
        cuda::nccl();
        return "";
    } catch (const std::exception& e) {
        return e.what();
    }
}

void newNcclId(signed char* dst) {
    cuda::NcclUniqueId id;
    cuda::checkNccl(cuda::nccl().getUniqueId(&id), "ncclGetUniqueId");
    std::memcpy(dst, id.internal, kCollectiveIdBytes);
}

std::unique_ptr<Collective> newNcclCollective(const signed char* id, int worldSize, int rank, int device,
                                              int64_t timeoutMillis) {
    return std::make_unique<cuda::NcclCollective>(id, worldSize, rank, device, timeoutMillis);
}

}  // namespace mamba
