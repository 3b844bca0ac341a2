// The CPU backend's worker pool: static partitioning (not work stealing), so which chunk computes which
// element is a function of the call only. Every op splits its work into tasks whose results do not depend
// on how tasks are grouped into chunks, so an op gives the same bits on 1 thread, on N threads, and when
// it runs inline because the pool is busy (see the locking notes in thread_pool.cpp).
//
// Safe for any number of concurrent callers: one job owns the process-wide pool at a time; a caller that
// finds it busy, or that is itself running inside a job (nesting), runs its whole range inline.
#pragma once

#include <cstdint>
#include <type_traits>

namespace mamba::cpu {

/** A borrowed callable fn(begin, end) (no allocation, no ownership: the callable outlives the call). */
class RangeFn {
public:
    template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, RangeFn>>>
    RangeFn(const F& f)  // NOLINT: implicit on purpose, parallelFor takes lambdas
        : ctx_(&f), call_([](const void* c, int64_t b, int64_t e) { (*static_cast<const F*>(c))(b, e); }) {}
    void operator()(int64_t begin, int64_t end) const { call_(ctx_, begin, end); }

private:
    const void* ctx_;
    void (*call_)(const void*, int64_t, int64_t);
};

/**
 * Calls fn(begin, end) over [0, n) split into at most cpuPoolThreads() contiguous chunks of at least
 * minPerChunk items; runs fn(0, n) on the calling thread when the work is small, when the pool is busy
 * with another caller's job, or when called from inside a job. Returns when every chunk is done; an
 * exception thrown by a chunk is rethrown here (after all chunks finished).
 */
void parallelFor(int64_t n, int64_t minPerChunk, RangeFn fn);

/** The pool's configured thread count (the calling thread included). */
int cpuPoolThreads();

/** Replaces the pool with one of `threads` threads; callers inside the old pool finish on it first. */
void resizePool(int threads);

/** True on a pool worker thread, and on a caller thread while it runs a job's chunk or an inline range. */
bool insidePoolJob();

/** True on a pool worker thread only (what it runs was dispatched by another thread's parallelFor). */
bool onPoolWorker();

}  // namespace mamba::cpu
