// The worker pool. Locking design of the whole CPU backend: see blas_threads.h. In short, for the pool:
//  - the pool in use is a shared_ptr taken under the registry mutex for the length of one parallelFor, so
//    resizePool (setCpuThreads) can swap in a new pool at any time; the old one is destroyed (its idle
//    workers joined) by whichever thread drops the last reference, never while a job runs on it;
//  - one job at a time owns a pool (`busy_`, taken with a non-blocking compare-exchange): a concurrent
//    caller that finds it busy runs its range inline instead of waiting, so no caller ever blocks on the
//    pool and the pool takes part in no lock cycle;
//  - a job's chunks (and the owner's own chunk 0) run with `tlsInJob` set, and a parallelFor made there
//    runs inline: nested calls never touch the pool, so they cannot self-deadlock;
//  - `mutex_` guards the job slot only and is never held while user code runs.
#include "thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace mamba::cpu {
namespace {

thread_local bool tlsInJob = false;   // running some job's chunk (or an inline range): nest inline
thread_local bool tlsWorker = false;  // a pool worker thread

/** Restores tlsInJob on scope exit. */
class InJobScope {
public:
    InJobScope() : saved_(tlsInJob) { tlsInJob = true; }
    ~InJobScope() { tlsInJob = saved_; }
    InJobScope(const InJobScope&) = delete;
    InJobScope& operator=(const InJobScope&) = delete;

private:
    bool saved_;
};

void runChunk(const RangeFn& fn, int64_t n, int chunks, int index) {
    const int64_t begin = n * index / chunks, end = n * (index + 1) / chunks;
    if (begin < end) fn(begin, end);
}

class ThreadPool {
public:
    explicit ThreadPool(int threads) {
        try {
            workers_.reserve(static_cast<size_t>(std::max(0, threads - 1)));
            for (int i = 1; i < std::max(1, threads); ++i) workers_.emplace_back([this, i] { workerLoop(i); });
        } catch (...) {  // thread creation failed: stop the ones already running (a joinable std::thread must not die)
            stopAndJoin();
            throw;
        }
    }

    ~ThreadPool() { stopAndJoin(); }

    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int threads() const { return static_cast<int>(workers_.size()) + 1; }

    /** Runs fn over `chunks` chunks if no other job owns the pool; returns false (nothing run) otherwise. */
    bool tryRun(int64_t n, int chunks, const RangeFn& fn) {
        bool expected = false;
        if (!busy_.compare_exchange_strong(expected, true, std::memory_order_acquire)) return false;
        InJobScope scope;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            job_ = &fn;
            n_ = n;
            chunks_ = chunks;
            pending_ = chunks - 1;
            error_ = nullptr;
            ++generation_;
        }
        wake_.notify_all();
        std::exception_ptr error;
        try {
            runChunk(fn, n, chunks, 0);
        } catch (...) {
            error = std::current_exception();
        }
        {
            // fn lives on the caller's stack: wait for every chunk even when ours threw.
            std::unique_lock<std::mutex> lock(mutex_);
            done_.wait(lock, [this] { return pending_ == 0; });
            job_ = nullptr;
            if (!error) error = error_;
            error_ = nullptr;
        }
        busy_.store(false, std::memory_order_release);
        if (error) std::rethrow_exception(error);
        return true;
    }

private:
    void stopAndJoin() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stop_ = true;
        }
        wake_.notify_all();
        for (auto& t : workers_) t.join();
    }

    void workerLoop(int index) {
        tlsInJob = true;  // everything a worker runs is part of some job
        tlsWorker = true;
        uint64_t seen = 0;
        for (;;) {
            const RangeFn* job;
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
            // A worker woken late may see a newer generation than the one it was woken for: it then takes
            // part in that one. Workers beyond the job's chunk count only record the generation.
            if (job && index < chunks) {
                std::exception_ptr error;
                try {
                    runChunk(*job, n, chunks, index);
                } catch (...) {
                    error = std::current_exception();
                }
                std::lock_guard<std::mutex> lock(mutex_);
                if (error && !error_) error_ = error;
                if (--pending_ == 0) done_.notify_all();
            }
        }
    }

    std::vector<std::thread> workers_;
    std::atomic<bool> busy_{false};
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    const RangeFn* job_ = nullptr;
    int64_t n_ = 0;
    int chunks_ = 0;
    int pending_ = 0;
    uint64_t generation_ = 0;
    std::exception_ptr error_;
    bool stop_ = false;
};

int defaultThreads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

// The registry is never destroyed: a thread still calling into libmamba while the process exits must not
// find a destroyed mutex, and idle workers blocked in a condition wait do not keep the process alive.
struct Registry {
    std::mutex mutex;
    std::shared_ptr<ThreadPool> pool;        // created on first parallel use
    std::atomic<int> threads{defaultThreads()};
};
Registry& registry() {
    static Registry* r = new Registry();
    return *r;
}

std::shared_ptr<ThreadPool> currentPool() {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (!r.pool) r.pool = std::make_shared<ThreadPool>(r.threads.load(std::memory_order_relaxed));
    return r.pool;
}

}  // namespace

void parallelFor(int64_t n, int64_t minPerChunk, RangeFn fn) {
    if (n <= 0) return;
    const int64_t byWork = n / std::max<int64_t>(1, minPerChunk);
    const int threads = registry().threads.load(std::memory_order_relaxed);
    int chunks = static_cast<int>(std::min<int64_t>(threads, std::max<int64_t>(1, byWork)));
    if (chunks <= 1 || tlsInJob) {
        fn(0, n);
        return;
    }
    const std::shared_ptr<ThreadPool> pool = currentPool();  // keeps this pool alive through a resize
    chunks = std::min(chunks, pool->threads());
    if (chunks <= 1 || !pool->tryRun(n, chunks, fn)) {
        InJobScope scope;  // inline: still a job, so nested calls stay inline too
        fn(0, n);
    }
}

int cpuPoolThreads() { return registry().threads.load(std::memory_order_relaxed); }

void resizePool(int threads) {
    threads = std::max(1, threads);
    Registry& r = registry();
    std::shared_ptr<ThreadPool> old;
    {
        std::lock_guard<std::mutex> lock(r.mutex);
        r.threads.store(threads, std::memory_order_relaxed);
        if (r.pool && r.pool->threads() == threads) return;
        old = std::move(r.pool);
        r.pool = std::make_shared<ThreadPool>(threads);
    }
    // `old` is released here, outside the registry lock: if no caller still runs on it, this joins its idle
    // workers; otherwise the last such caller does when its parallelFor returns.
}

bool insidePoolJob() { return tlsInJob; }
bool onPoolWorker() { return tlsWorker; }

}  // namespace mamba::cpu
