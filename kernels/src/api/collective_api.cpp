// The public mamba::NcclComm (mamba.h): argument checks; the collectives are runtime/collective.h's
// (NCCL in cuda/nccl_collective.cu). NcclComm::sumGradients is in trainer_api.cpp, which knows the trainer.
#include "core/errors.h"
#include "runtime/collective.h"

namespace mamba {

int ncclUniqueIdSize() { return kCollectiveIdBytes; }

std::string ncclUnavailableReason() { return ncclUnavailable(); }

void ncclNewUniqueId(signed char* dst, int64_t dstLength) {
    require(dst != nullptr, "destination is null");
    require(dstLength == kCollectiveIdBytes, "an NCCL unique id has " + std::to_string(kCollectiveIdBytes) +
                                                 " bytes, the destination " + std::to_string(dstLength));
    newNcclId(dst);
}

NcclComm::NcclComm(const signed char* id, int64_t idLength, int worldSize, int rank, int device, int64_t timeoutMillis)
    : impl_(nullptr) {
    require(id != nullptr, "the NCCL unique id is null");
    require(idLength == kCollectiveIdBytes, "an NCCL unique id has " + std::to_string(kCollectiveIdBytes) +
                                                " bytes, got " + std::to_string(idLength));
    require(worldSize >= 1, "world size = " + std::to_string(worldSize) + " must be >= 1");
    require(rank >= 0 && rank < worldSize,
            "rank = " + std::to_string(rank) + " must be in [0, " + std::to_string(worldSize) + ")");
    require(device >= 0, "NCCL needs a CUDA device, got device code " + std::to_string(device));
    require(timeoutMillis >= 1, "timeout = " + std::to_string(timeoutMillis) + " ms must be >= 1");
    auto impl = std::make_unique<Impl>();
    impl->collective = newNcclCollective(id, worldSize, rank, device, timeoutMillis);
    impl->world = worldSize;
    impl->rank = rank;
    impl->device = device;
    impl_ = impl.release();
}

NcclComm::~NcclComm() { delete impl_; }

int NcclComm::rank() const { return impl_->rank; }
int NcclComm::worldSize() const { return impl_->world; }
int NcclComm::device() const { return impl_->device; }

void NcclComm::allGather(const double* local, int64_t n, double* gathered, int64_t gatheredLength) {
    require(local != nullptr && gathered != nullptr, "an all-gather array is null");
    require(n >= 1 && n <= (int64_t{1} << 24), "all-gather of " + std::to_string(n) + " values: must be in [1, 2^24]");
    require(gatheredLength == n * impl_->world, "the gathered array has " + std::to_string(gatheredLength) +
                                                    " values, expected n * worldSize = " +
                                                    std::to_string(n * impl_->world));
    impl_->collective->allGather(local, n, gathered);
}

void NcclComm::broadcast(float* data, int64_t n, int root) {
    require(data != nullptr, "the broadcast array is null");
    require(n >= 1, "broadcast of " + std::to_string(n) + " floats: must be >= 1");
    require(root >= 0 && root < impl_->world,
            "root = " + std::to_string(root) + " must be in [0, " + std::to_string(impl_->world) + ")");
    impl_->collective->broadcast(data, n, root);
}

void NcclComm::abort() { impl_->collective->abort(); }

}  // namespace mamba
