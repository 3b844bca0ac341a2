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
 * A writer-preferring shared lock: once a writer waits, new readers wait behind it, so a threaded product
 * is not starved by a stream of single-threaded ones. Not recursive; BlasRead's per-thread depth makes
 * sure no thread asks twice.
 */
class SharedLock {
public:
    void lockShared() {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this] { return !writer_ && writersWaiting_ == 0; });
        ++readers_;
    }
    void unlockShared() {
        std::lock_guard<std::mutex> lock(mutex_);
        if (--readers_ == 0) cv_.notify_all();
    }
    void lock() {
        std::unique_lock<std::mutex> lock(mutex_);
        ++writersWaiting_;
        cv_.wait(lock, [this] { return !writer_ && readers_ == 0; });
        --writersWaiting_;
        writer_ = true;
    }
    void unlock() {
        std::lock_guard<std::mutex> lock(mutex_);
        writer_ = false;
        cv_.notify_all();
    }

private:
    std::mutex mutex_;
    std::condition_variable cv_;
    int readers_ = 0;
    int writersWaiting_ = 0;
    bool writer_ = false;
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
