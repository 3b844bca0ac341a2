// A small fixed-size worker pool with static partitioning. Static chunks (not work stealing) keep
// which thread computes which element fixed, so reductions done per chunk are reproducible.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mamba::cpu {

class ThreadPool {
public:
    explicit ThreadPool(int threads);
    ~ThreadPool();

    int threads() const { return static_cast<int>(workers_.size()) + 1; }

    /**
     * Calls fn(begin, end) over [0, n) split into at most threads() contiguous chunks; runs inline
     * when n < 2 * minPerChunk or there is one thread. Returns when every chunk is done.
     */
    void parallelFor(int64_t n, int64_t minPerChunk, const std::function<void(int64_t, int64_t)>& fn);

private:
    void workerLoop(int index);

    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    const std::function<void(int64_t, int64_t)>* job_ = nullptr;
    int64_t n_ = 0;
    int chunks_ = 0;
    int pending_ = 0;
    uint64_t generation_ = 0;
    bool stop_ = false;
};

/** The process-wide pool used by the CPU backend; resized by setCpuThreads. */
ThreadPool& pool();
void resizePool(int threads);

}  // namespace mamba::cpu
