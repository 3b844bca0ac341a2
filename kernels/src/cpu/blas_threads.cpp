// blasLock and OpenBLAS's thread count (design and lock order: blas_threads.h).
#include "blas_threads.h"

#include "thread_pool.h"

#include <cblas.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace mamba::cpu {
namespace {

/**
 * A writer-preferring shared lock with a lock-free reader fast path (readers come once per product, so on
 * every decode step). state_ counts readers; kWriter is set while a writer waits or holds the lock, and
 * then new readers sleep on cv_ instead of entering, so a threaded product is not starved by a stream of
 * single-threaded ones. Writers are serialised by writerMutex_ for the whole exclusive section. Not
 * recursive; BlasRead's per-thread depth makes sure no thread asks twice.
 */
class SharedLock {
public:
    void lockShared() {
        int s = state_.load(std::memory_order_relaxed);
        for (;;) {
            if ((s & kWriter) == 0) {
                if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acquire, std::memory_order_relaxed)) return;
                continue;  // s was reloaded
            }
            std::unique_lock<std::mutex> lock(mutex_);
            cv_.wait(lock, [this] { return (state_.load(std::memory_order_relaxed) & kWriter) == 0; });
            s = state_.load(std::memory_order_relaxed);
        }
    }
    void unlockShared() {
        // The last reader out while a writer waits wakes it. Taking mutex_ to notify closes the window
        // between the writer's check of state_ and its sleep (the writer checks and sleeps under mutex_).
        if (state_.fetch_sub(1, std::memory_order_release) - 1 == kWriter) {
            std::lock_guard<std::mutex> lock(mutex_);
            cv_.notify_all();
        }
    }
    void lock() {
        writerMutex_.lock();
        std::unique_lock<std::mutex> lock(mutex_);
        state_.fetch_or(kWriter, std::memory_order_acquire);
        cv_.wait(lock, [this] { return state_.load(std::memory_order_acquire) == kWriter; });  // readers drained
    }
    void unlock() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            state_.fetch_and(~kWriter, std::memory_order_release);
        }
        cv_.notify_all();  // sleeping readers
        writerMutex_.unlock();
    }

private:
    static constexpr int kWriter = 1 << 30;
    std::atomic<int> state_{0};
    std::mutex mutex_;  // guards sleeping and waking on cv_
    std::condition_variable cv_;
    std::mutex writerMutex_;
};

struct BlasControl {
    SharedLock lock;
    std::atomic<int> threads{1};

    BlasControl() {
        // OpenBLAS starts at its own default (OPENBLAS_NUM_THREADS or the core count): that becomes the
        // threaded products' count, and the resting count becomes 1.
        lock.lock();
        const int initial = openblas_get_num_threads();
        threads.store(initial > 0 ? initial : 1, std::memory_order_relaxed);
        openblas_set_num_threads(1);
        lock.unlock();
    }

    void acquireRead() {
        for (;;) {
            lock.lockShared();
            // Something outside this file (another library sharing OpenBLAS) may have raised the count:
            // put it back to 1 before relying on it.
            if (openblas_get_num_threads() == 1) return;
            lock.unlockShared();
            lock.lock();
            openblas_set_num_threads(1);
            lock.unlock();
        }
    }
};

BlasControl& control() {
    static BlasControl* c = new BlasControl();  // never destroyed: see thread_pool.cpp's registry
    return *c;
}

// Shared holds (and exclusive ones) this thread has open; only the outermost one locks.
thread_local int tlsDepth = 0;

}  // namespace

BlasRead::BlasRead() : held_(tlsDepth == 0 && !onPoolWorker()) {
    ++tlsDepth;
    if (!held_) return;
    try {
        control().acquireRead();
    } catch (...) {
        --tlsDepth;
        throw;
    }
}

BlasRead::~BlasRead() {
    --tlsDepth;
    if (held_) control().lock.unlockShared();
}

BlasThreaded::BlasThreaded(int threads) {
    BlasControl& c = control();
    c.lock.lock();
    ++tlsDepth;  // a BlasRead inside this scope must not ask for the lock again
    openblas_set_num_threads(threads);
}

BlasThreaded::~BlasThreaded() {
    openblas_set_num_threads(1);
    --tlsDepth;
    control().lock.unlock();
}

bool blasThreadedAllowed() { return tlsDepth == 0 && !insidePoolJob(); }

int blasThreads() { return control().threads.load(std::memory_order_relaxed); }

void setBlasThreads(int threads) { control().threads.store(threads > 0 ? threads : 1, std::memory_order_relaxed); }

}  // namespace mamba::cpu
