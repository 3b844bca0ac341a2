// OpenBLAS threading under concurrent callers, and the locking design of the whole CPU backend.
//
// ---- The problem ----
// OpenBLAS's thread count is ONE process-wide setting (openblas_set_num_threads; its *_local variant is
// the same call in pthreads builds). Our training products must run it single-threaded (its partition
// depends on the count, which would change the last bits), small inference products run it
// single-threaded for latency, and large inference products run it threaded. Flipping the setting around
// each call, as the backend once did, races with other threads: a "single-threaded" tile silently turns
// threaded (results change) and two threaded calls or a count change during a threaded call corrupt
// OpenBLAS's server state.
//
// ---- The design ----
// 1. OpenBLAS rests at 1 thread. Every single-threaded call is then simply a call.
// 2. A threaded call raises the count, calls, and lowers it back to 1, all while holding `blasLock`
//    EXCLUSIVELY (BlasThreaded). Count changes happen nowhere else (setCpuThreads only stores the
//    target count used by the next threaded call).
// 3. Single-threaded calls hold `blasLock` SHARED (BlasRead), so they never overlap a threaded call's
//    window in which the process-wide count is > 1. Readers do not exclude each other: two models'
//    training products (tiles on single-threaded OpenBLAS) run at the same time.
// 4. The shared hold is taken once, by the thread that enters the op (depth counted per thread, so an op
//    calling another op does not re-lock), and it covers the pool workers that op's parallelFor
//    dispatches: workers never take blasLock. That is what keeps the lock acyclic: a writer-preferring
//    lock would otherwise deadlock when a dispatcher holds it shared, a writer queues, and the
//    dispatcher's worker (which the dispatcher waits for) asks for it shared behind that writer.
//    Consequence (the rule): OpenBLAS may be called from a parallelFor body only when the thread that
//    called parallelFor holds BlasRead (today only cpu_gemm.cpp's tiles do it).
// 5. A thread that already holds blasLock shared, or runs inside a pool job, never asks for it
//    exclusively (that would wait for itself): such a product runs single-threaded instead.
//
// ---- Lock order (acquire left to right, never the other way) ----
//   blasLock (shared or exclusive)  →  pool registry mutex  →  a pool's job-slot mutex  →  OpenBLAS's own locks.
// The pool is owned with a non-blocking try (a busy pool means "run inline"), so no thread ever waits for
// the pool while holding anything; a pool's job-slot mutex is never held while user code runs; a
// threaded call (exclusive holder) waits only for OpenBLAS's own threads, never for our pool or for
// another of our locks. Hence no cycle, hence no deadlock, for any number of calling threads.
#pragma once

namespace mamba::cpu {

/** Shared hold of blasLock for single-threaded OpenBLAS calls (no-op when this thread is already covered). */
class BlasRead {
public:
    BlasRead();
    ~BlasRead();
    BlasRead(const BlasRead&) = delete;
    BlasRead& operator=(const BlasRead&) = delete;

private:
    bool held_;
};

/** Exclusive hold of blasLock with OpenBLAS running `threads` threads; back to 1 on destruction. */
class BlasThreaded {
public:
    explicit BlasThreaded(int threads);
    ~BlasThreaded();
    BlasThreaded(const BlasThreaded&) = delete;
    BlasThreaded& operator=(const BlasThreaded&) = delete;
};

/** Whether this thread may take BlasThreaded now (not covered by a shared hold, not inside a pool job). */
bool blasThreadedAllowed();

/** The thread count threaded products use (initially OpenBLAS's own default; setCpuThreads sets it). */
int blasThreads();
void setBlasThreads(int threads);

}  // namespace mamba::cpu
