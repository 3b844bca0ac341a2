#include "thread_pool.h"

#include <algorithm>
#include <memory>

namespace mamba::cpu {

ThreadPool::ThreadPool(int threads) {
    for (int i = 1; i < std::max(1, threads); ++i) workers_.emplace_back([this, i] { workerLoop(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
}

static void runChunk(const std::function<void(int64_t, int64_t)>& fn, int64_t n, int chunks, int index) {
    const int64_t begin = n * index / chunks, end = n * (index + 1) / chunks;
    if (begin < end) fn(begin, end);
}

void ThreadPool::parallelFor(int64_t n, int64_t minPerChunk, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    const int64_t byWork = n / std::max<int64_t>(1, minPerChunk);
    const int chunks = static_cast<int>(std::min<int64_t>(threads(), std::max<int64_t>(1, byWork)));
    if (chunks == 1) {
        fn(0, n);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        job_ = &fn;
        n_ = n;
        chunks_ = chunks;
        pending_ = chunks - 1;
        ++generation_;
    }
    wake_.notify_all();
    runChunk(fn, n, chunks, 0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    job_ = nullptr;
}

void ThreadPool::workerLoop(int index) {
    uint64_t seen = 0;
    for (;;) {
        const std::function<void(int64_t, int64_t)>* job;
        int64_t n;
        int chunks;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            job = job_;
            n = n_;
            chunks = chunks_;
        }
        if (index < chunks) {
            runChunk(*job, n, chunks, index);
            std::lock_guard<std::mutex> lock(mutex_);
            if (--pending_ == 0) done_.notify_all();
        }
    }
}

namespace {
std::mutex poolMutex;
std::unique_ptr<ThreadPool> globalPool;
}  // namespace

ThreadPool& pool() {
    std::lock_guard<std::mutex> lock(poolMutex);
    if (!globalPool) globalPool = std::make_unique<ThreadPool>(std::max(1u, std::thread::hardware_concurrency()));
    return *globalPool;
}

void resizePool(int threads) {
    std::lock_guard<std::mutex> lock(poolMutex);
    globalPool = std::make_unique<ThreadPool>(threads);
}

}  // namespace mamba::cpu
