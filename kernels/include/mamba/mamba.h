// libmamba public API. This is the only header JavaCPP parses: keep it small, coarse and stable —
// plain structs, raw pointers + sizes for host data, std::string, no templates or STL containers.
// Every function validates its arguments and reports errors as C++ exceptions (std::invalid_argument,
// std::out_of_range, std::runtime_error, mamba::OutOfMemoryError); the JNI layer turns them into
// Java exceptions carrying the message.
#pragma once

#include <cstdint>
#include <string>

#ifndef MAMBA_API
#define MAMBA_API __attribute__((visibility("default")))
#endif

namespace mamba {

/** Architecture tags stored in ModelConfig::arch and in checkpoints. */
enum Arch { ARCH_MAMBA1 = 1, ARCH_MAMBA3_SISO = 3 };

/** Weight storage types. Compute, state, residual stream, norms, A_log and D are always f32. */
enum DTypeCode { DTYPE_F32 = 0, DTYPE_TF32 = 1, DTYPE_BF16 = 2, DTYPE_F16 = 3 };

/** Device codes: DEVICE_CPU, or a CUDA ordinal >= 0 passed as-is. */
enum DeviceCode { DEVICE_CPU = -1 };

/**
 * Model hyper-parameters. input_dim == 0 means "no input projection": inputs are d_model wide and
 * enter the residual stream directly (the LM path); otherwise a Linear(input_dim -> d_model) with bias
 * runs first. dt_rank == 0 means "auto" = ceil(d_model / 16).
 */
struct MAMBA_API ModelConfig {
    int32_t arch = ARCH_MAMBA1;
    int32_t d_model = 128;
    int32_t d_state = 16;
    int32_t d_conv = 4;
    int32_t expand = 2;
    int32_t dt_rank = 0;
    int32_t n_layers = 3;
    int32_t input_dim = 0;
    float norm_eps = 1e-5f;
    float dt_min = 0.001f;
    float dt_max = 0.1f;
    float dt_init_floor = 1e-4f;
};

/** Throws std::invalid_argument naming the first field out of range and its limit. */
MAMBA_API void validateConfig(const ModelConfig& config);

/** libmamba version string, including whether CUDA support was compiled in. */
MAMBA_API std::string version();

/** Does nothing; measures the cost of a JNI call. */
MAMBA_API void noop();

/** Number of usable CUDA devices; 0 when the library has no CUDA support, no driver or no GPU. */
MAMBA_API int cudaDeviceCount();
/** Why cudaDeviceCount() is 0 (empty when it is not). */
MAMBA_API std::string cudaUnavailableReason();
MAMBA_API std::string cudaDeviceName(int ordinal);
MAMBA_API int64_t cudaDeviceTotalMemory(int ordinal);
MAMBA_API int64_t cudaDeviceFreeMemory(int ordinal);

/** CPU worker threads used by libmamba's own loops and by OpenBLAS (default: hardware threads). */
MAMBA_API void setCpuThreads(int threads);
MAMBA_API int cpuThreads();
/** The OpenBLAS kernel family in use (e.g. "Haswell"), for benchmark logs. */
MAMBA_API std::string blasCoreName();

class ModelImpl;
class StateImpl;
class Model;

/**
 * Recurrent state of a batch of independent sequences: per row and layer the conv history
 * (d_conv-1 pre-conv inputs per channel, oldest first) and the SSM state h [d_inner, d_state].
 * A row is a contiguous block of rowSize() floats, so a server can park and restore sequences.
 */
class MAMBA_API State {
public:
    /** A zeroed state for `batch` sequences of `model`'s shape, on its device. */
    State(const Model& model, int batch);
    ~State();
    State(const State&) = delete;
    State& operator=(const State&) = delete;
    int batch() const;
    int64_t rowSize() const;
    /** Zeroes every row. */
    void reset();
    void resetRow(int row);
    /** Copies row `row` into dst (rowSize() floats). */
    void readRow(int row, float* dst, int64_t dstLength) const;
    /** Overwrites row `row` from src (rowSize() floats). */
    void writeRow(int row, const float* src, int64_t srcLength);
    /** Copies every row of other (same model shape and batch) into this state. */
    void copyFrom(const State& other);

    StateImpl* impl() const { return impl_; }

private:
    StateImpl* impl_;
};

/**
 * A Mamba model (Mamba-1 now, Mamba-3 SISO later) with its weights on one device.
 * Not thread-safe: one call at a time (the Java API serialises calls).
 * Parameters are named and shaped as in HuggingFace checkpoints (linear weights [out, in]).
 */
class MAMBA_API Model {
public:
    /** Builds a model with the seeded paper initialisation; same seed, same weights. */
    Model(const ModelConfig& config, int device, int dtype, int64_t seed);
    ~Model();
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    ModelConfig config() const;
    int device() const;
    int dtype() const;
    int inputWidth() const;
    /**
     * On CUDA devices, record each decode step (per state and batch) as a CUDA graph on first use and
     * replay it afterwards: the same kernels, so results are bit-identical to eager steps. No-op on CPU.
     */
    void setCudaGraphs(bool enabled);
    bool cudaGraphs() const;

    int paramCount() const;
    int64_t paramTotalSize() const;
    std::string paramName(int index) const;
    /** Index of the parameter with this name, or -1. */
    int paramIndex(const std::string& name) const;
    int paramRank(int index) const;
    int64_t paramDim(int index, int axis) const;
    int64_t paramSize(int index) const;
    /** Copies parameter `index` (f32, row-major) into dst. */
    void readParam(int index, float* dst, int64_t dstLength) const;
    /** Overwrites parameter `index` from src (f32, row-major); converts to the storage dtype. */
    void writeParam(int index, const float* src, int64_t srcLength);

    /**
     * One time step for every row of the state: x [B, inputWidth] → y [B, d_model]
     * (the final-norm output). The state advances by one step.
     */
    void step(State& state, const float* x, int64_t xLength, float* y, int64_t yLength);

    /**
     * Consumes T steps per row, x [B, T, inputWidth], carrying the state in and out.
     * y receives the last position's output [B, d_model] (may be null with yLength 0).
     */
    void prefill(State& state, const float* x, int64_t xLength, int T, float* y, int64_t yLength);

    /**
     * Runs x [B, T, inputWidth] and writes every position's output y [B, T, d_model].
     * With state == nullptr it starts from zeros and keeps no state; otherwise it carries it.
     */
    void forward(State* state, const float* x, int64_t xLength, int B, int T, float* y, int64_t yLength);

    ModelImpl* impl() const { return impl_; }

private:
    ModelImpl* impl_;
};

}  // namespace mamba
