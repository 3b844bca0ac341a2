// Timing shared by the kernel benches (gemm_tc_bench, gemv_bench): a call captured `reps` times in a CUDA graph on a
// fresh stream, the graph replayed six times, the median of the last five replays divided by `reps`. Graph replay
// leaves out the host's launch cost, which a decode step (itself a replayed graph) does not pay either.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace mamba::bench {

inline void checkCuda(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
        std::exit(2);
    }
}

/**
 * Microseconds per call of f(i), i = 0 … reps − 1 (the index lets a call rotate over weight copies). While it
 * runs, `stream` (the bench's launch stream) is the capture stream; f(0) runs once first, outside the capture.
 */
template <typename F>
double graphTimeUs(F f, int reps, cudaStream_t& stream) {
    cudaStream_t st;
    checkCuda(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
    const cudaStream_t saved = stream;
    stream = st;
    f(0);  // warm-up outside the capture (opt-ins, lazy loading)
    checkCuda(cudaStreamSynchronize(st), "warm-up");
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    checkCuda(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "capture");
    for (int i = 0; i < reps; ++i) f(i);
    checkCuda(cudaStreamEndCapture(st, &graph), "end capture");
    checkCuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    cudaEvent_t a, b;
    checkCuda(cudaEventCreate(&a), "event");
    checkCuda(cudaEventCreate(&b), "event");
    std::vector<float> t;
    for (int i = 0; i < 6; ++i) {
        cudaEventRecord(a, st);
        cudaGraphLaunch(exec, st);
        cudaEventRecord(b, st);
        cudaEventSynchronize(b);
        float ms;
        cudaEventElapsedTime(&ms, a, b);
        if (i > 0) t.push_back(ms * 1000.f / reps);
    }
    checkCuda(cudaGetLastError(), "timing");
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(st);
    stream = saved;
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

}  // namespace mamba::bench
