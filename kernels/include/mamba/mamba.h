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

/**
 * How matrix products are computed (Model::setGemmMode).
 * GEMM_DETERMINISTIC: our own fixed-order kernels — bit-reproducible, and batch-invariant (a row's result does
 *   not depend on how many rows share the call or what they hold), for every product of inference and of the
 *   training forward.
 * GEMM_CUBLAS_FAST: the fastest kernels (cuBLAS / OpenBLAS); the default.
 * GEMM_CUBLAS_PEDANTIC: cuBLAS with pedantic math (no reduced-precision shortcuts); on the CPU, fixed tiles.
 */
enum GemmModeCode { GEMM_DETERMINISTIC = 0, GEMM_CUBLAS_FAST = 1, GEMM_CUBLAS_PEDANTIC = 2 };

/** Device codes: DEVICE_CPU, or a CUDA ordinal >= 0 passed as-is. */
enum DeviceCode { DEVICE_CPU = -1 };

/**
 * Model hyper-parameters. input_dim == 0 means "no input projection": inputs are d_model wide and
 * enter the residual stream directly (the LM path); otherwise a Linear(input_dim -> d_model) with bias
 * runs first. dt_rank == 0 means "auto" = ceil(d_model / 16).
 * Fields marked [M1] are read by Mamba-1 only, [M3] by Mamba-3 SISO only; the rest by both.
 */
struct MAMBA_API ModelConfig {
    int32_t arch = ARCH_MAMBA1;
    int32_t d_model = 128;
    int32_t d_state = 16;
    int32_t d_conv = 4;           // [M1]
    int32_t expand = 2;
    int32_t dt_rank = 0;          // [M1]
    int32_t n_layers = 3;
    int32_t input_dim = 0;
    /** Block and final RMSNorm epsilon (Mamba-3's B/C and gate norms use a fixed 1e-5, as the official code). */
    float norm_eps = 1e-5f;
    float dt_min = 0.001f;
    float dt_max = 0.1f;
    float dt_init_floor = 1e-4f;
    int32_t headdim = 64;         // [M3] channels per head; d_inner = expand·d_model must be a multiple
    int32_t ngroups = 1;          // [M3] B/C groups; nheads must be a multiple
    float rope_fraction = 0.5f;   // [M3] 0.5 or 1: rotated share of d_state
    float a_floor = 1e-4f;        // [M3] A = min(-heavytail(dd_A), -a_floor)
    int32_t chunk_size = 64;      // [M3] steps per chunk of the chunked scan and of training's state checkpoints
    bool is_outproj_norm = false; // [M3] RMSNormGated (per head) before out_proj instead of the plain SiLU gate
    /** > 0 makes a language model: token embedding [vocab, d_model] in, logits [vocab] out (input_dim must be 0). */
    int32_t vocab_size = 0;
    /** LM head shares the embedding matrix (HF tie_word_embeddings); otherwise lm_head.weight [vocab, d_model]. */
    bool tie_embeddings = true;
};

/** Throws std::invalid_argument naming the first field out of range and its limit. */
MAMBA_API void validateConfig(const ModelConfig& config);

/**
 * The inclusive range validateConfig allows for an integer field, named as in its messages: "dModel",
 * "dState", "dConv", "expand", "dInner", "layers", "inputDim", "dtRank", "vocabSize", and for Mamba-3 "headdim", "ngroups", "chunkSize", "headState" (headdim·dState). Throws
 * std::invalid_argument for any other name. Other formats (HF config.json) quote these, never copy them.
 */
MAMBA_API int64_t configFieldMin(const std::string& field);
MAMBA_API int64_t configFieldMax(const std::string& field);

/**
 * The tensors of a model of this configuration, without building the model: HuggingFace names, shapes
 * and AdamW's default no-decay flags, in the model's parameter order. The one source of these facts: the
 * Java checkpoint readers and optimiser ask here.
 */
class MAMBA_API ParamLayout {
public:
    /** Validates the config (std::invalid_argument naming the field). */
    explicit ParamLayout(const ModelConfig& config);
    ~ParamLayout();
    ParamLayout(const ParamLayout&) = delete;
    ParamLayout& operator=(const ParamLayout&) = delete;

    int count() const;
    std::string name(int index) const;
    /** Index of the tensor with this name, or -1. */
    int indexOf(const std::string& name) const;
    int rank(int index) const;
    int64_t dim(int index, int axis) const;
    int64_t size(int index) const;
    /** Whether AdamW's weight decay skips this tensor by default (norms, biases, A_log, D, the token embedding). */
    bool noDecay(int index) const;

private:
    void* impl_;
};

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
class TensorImpl;
class SamplerImpl;
class Model;
class Sampler;

/**
 * An owning buffer on a device (or the host for DEVICE_CPU) with a dtype and a shape, for zero-copy
 * inputs/outputs and interop: data() is a device pointer other CUDA code can use. Host copies move
 * whole buffers; float copies need an F32/TF32 tensor, byte copies work for any dtype.
 */
class MAMBA_API Tensor {
public:
    Tensor(int device, int dtype, const int64_t* shape, int rank);
    ~Tensor();
    Tensor(const Tensor&) = delete;
    Tensor& operator=(const Tensor&) = delete;

    int device() const;
    int dtype() const;
    int rank() const;
    int64_t dim(int axis) const;
    /** Number of elements. */
    int64_t size() const;
    int64_t bytes() const;
    /** The buffer's address (device memory for CUDA tensors). */
    void* data() const;
    void copyFromHost(const float* src, int64_t count);
    void copyToHost(float* dst, int64_t count) const;
    void copyFromHostBytes(const void* src, int64_t bytes);
    void copyToHostBytes(void* dst, int64_t bytes) const;
    void zero();

    TensorImpl* impl() const { return impl_; }

private:
    TensorImpl* impl_;
};

/**
 * Host memory for a device's large transfers (a training batch's inputs and targets, many rows of logits): page-locked
 * when `device` is a CUDA ordinal and the driver grants it, so copies between it and the device run by DMA at the
 * link's rate, with no staging copy inside the library; plain memory for DEVICE_CPU or when pinning is refused
 * (pinned() says which). Any model's calls accept it like any host pointer.
 */
class MAMBA_API HostBuffer {
public:
    HostBuffer(int device, int64_t bytes);
    ~HostBuffer();
    HostBuffer(const HostBuffer&) = delete;
    HostBuffer& operator=(const HostBuffer&) = delete;

    void* data() const;
    int64_t bytes() const;
    /** Whether the memory is page-locked for CUDA transfers. */
    bool pinned() const;

private:
    void* data_;
    int64_t bytes_;
    bool pinned_;
};

/**
 * Recurrent state of a batch of independent sequences, per row and layer. Mamba-1: the conv history
 * (d_conv-1 pre-conv inputs per channel, oldest first) and the SSM state h [d_inner, d_state]. Mamba-3 SISO:
 * the SSM state [nheads, headdim, d_state], the last rotated key [nheads, d_state], the last input
 * [nheads, headdim] and the rotation angles [nheads, num_rope_angles].
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
    /** Overwrites row `row` with row `otherRow` of other (same model shape and device; any batch), on the device. */
    void copyRowFrom(int row, const State& other, int otherRow);

    StateImpl* impl() const { return impl_; }

private:
    StateImpl* impl_;
};

/**
 * A Mamba model (Mamba-1 or Mamba-3 SISO) with its weights on one device.
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
    /** The GemmModeCode of every product (inference and a Trainer's forward); changing it drops captured graphs. */
    void setGemmMode(int mode);
    int gemmMode() const;
    /**
     * The CUDA stream (a cudaStream_t) every call on this model and its states enqueues its work on, for interop:
     * work another library queues on it runs before the model's next call, without a host synchronisation. The
     * stream is the model's own (non-blocking, created with the model, destroyed by it); calls still return only
     * when their results are complete. nullptr for a CPU model.
     */
    void* cudaStream() const;

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

    /** A decode step on F32 tensors already on the model's device: x [B, inputWidth] → y [B, d_model], no host copies. */
    void stepTensors(State& state, const Tensor& x, Tensor& y);

    // ---- language models (vocab_size > 0): token ids in, logits over the vocabulary out ----

    int vocabSize() const;
    /** One decode step: ids [B] → logits [B, vocab]. */
    void stepTokens(State& state, const int32_t* ids, int64_t idsLength, float* logits, int64_t logitsLength);
    /** A prompt of T tokens per row, ids [B, T], state carried; logits of the last position [B, vocab]. */
    void prefillTokens(State& state, const int32_t* ids, int64_t idsLength, int T, float* logits, int64_t logitsLength);
    /** Every position's logits [B, T, vocab]; state nullptr = start from zeros and keep nothing. */
    void forwardTokens(State* state, const int32_t* ids, int64_t idsLength, int B, int T, float* logits,
                       int64_t logitsLength);

    /**
     * stepTokens, then each row's next token is sampled on the model's device by `sampler` (same batch): only
     * the ids cross to the host, next [B]. With CUDA graphs on, the step and the sampling replay as one graph.
     * Each sampled id joins its row's history (the repetition penalty's seen set). A row whose logits hold NaN
     * or +Inf, or only -Inf, throws std::runtime_error naming the row and token (the other rows have sampled).
     */
    void stepTokensSample(State& state, Sampler& sampler, const int32_t* ids, int64_t idsLength, int32_t* next,
                          int64_t nextLength);
    /** prefillTokens of ids [B, T] (state carried), then the first token of each row sampled as stepTokensSample. */
    void prefillTokensSample(State& state, Sampler& sampler, const int32_t* ids, int64_t idsLength, int T,
                             int32_t* next, int64_t nextLength);

    ModelImpl* impl() const { return impl_; }

private:
    ModelImpl* impl_;
};

/**
 * Token sampling on a model's device for `batch` rows: per-row settings, a SplitMix64 random stream per row
 * (java.util.SplittableRandom's, so a seed gives the Java host sampler's draws) and the set of token ids seen so
 * far (the repetition penalty's history), all in device memory. The rule and its exact arithmetic (the same bits
 * on the CPU, on CUDA and in org.mamba4j.lm.TokenSampler) are in src/core/sampling.h. Rows sample the first
 * `vocab` logits of the model's rows (vocab <= the model's padded vocabulary). A fresh row is greedy with an
 * empty history and seed 0. Not thread-safe; use it with the model it was made for.
 */
class MAMBA_API Sampler {
public:
    Sampler(const Model& model, int batch, int vocab);
    ~Sampler();
    Sampler(const Sampler&) = delete;
    Sampler& operator=(const Sampler&) = delete;

    int batch() const;
    int vocab() const;
    /**
     * Configures row `row`: temperature (finite, >= 0; 0 = greedy), topK (>= 0; 0 = off), topP (in (0, 1]),
     * minP (in [0, 1)), repetitionPenalty (finite, > 0; used as a float), the seed of its random stream, and its
     * history (ids in [0, vocab), may be null with historyLength 0), which replaces the row's seen set.
     */
    void setRow(int row, double temperature, int topK, double topP, double minP, double repetitionPenalty, int64_t seed,
                const int32_t* history, int64_t historyLength);
    /** The random stream's state of a row (SplittableRandom's seed field after the row's draws). */
    int64_t randomState(int row) const;
    /** Samples from host logits [batch, rowWidth] (rowWidth >= vocab) on the sampler's device: next [batch]. */
    void sample(const float* logits, int64_t logitsLength, int rowWidth, int32_t* next, int64_t nextLength);

    SamplerImpl* impl() const { return impl_; }

private:
    SamplerImpl* impl_;
};

// ---- training (trainer_api.cpp) ----

/** AdamW hyper-parameters with PyTorch semantics (torch.optim.AdamW). */
struct MAMBA_API AdamWConfig {
    float lr = 1e-3f;
    float beta1 = 0.9f;
    float beta2 = 0.999f;
    float eps = 1e-8f;
    float weight_decay = 0.01f;
};

/** What a backward or optimizer step reports. */
struct MAMBA_API StepStats {
    int64_t step = 0;           // optimizer steps taken so far (after this call)
    bool applied = false;       // whether this call ran an optimizer step
    float grad_norm = 0.f;      // pre-clip global L2 norm of the gradient it stepped with (valid when applied)
    float learning_rate = 0.f;  // the learning rate of that step
    bool has_loss = false;      // loss/accuracy are set (the fused MSE / cross-entropy paths)
    float loss = 0.f;           // mean over the counted targets of this micro-batch
    float accuracy = 0.f;       // cross-entropy: fraction of counted positions whose argmax is the target
    int64_t counted = 0;        // targets counted (cross-entropy: positions not ignored; MSE: elements)
    float loss_scale = 1.f;     // the loss scale this call's gradients were computed with (1 without a scaler)
};

/**
 * Dynamic loss scaling with torch.cuda.amp.GradScaler semantics: every backward's output gradient (and an end-state
 * gradient) is multiplied by the current scale; the optimizer step divides the gradients by it (inside AdamW, after
 * the global norm is taken of the unscaled gradient). A step whose gradient norm (or fused loss) is NaN or infinite is
 * skipped — weights, moments and step count unchanged, gradients discarded, as without a scaler — and the scale is
 * multiplied by backoff_factor; after growth_interval applied steps in a row it is multiplied by growth_factor.
 */
struct MAMBA_API LossScalerConfig {
    bool enabled = false;
    float init_scale = 65536.f;   // 2^16
    float growth_factor = 2.f;    // > 1
    float backoff_factor = 0.5f;  // in (0, 1)
    int32_t growth_interval = 2000;
};

/** Whether backward/optimizer stages exist for a device code (DEVICE_CPU or a CUDA ordinal). */
MAMBA_API bool trainingSupported(int device);

/**
 * Trains a Model's own weights in place: a training forward over [batch, seqLen] that keeps an activation
 * tape, backpropagation through time, gradient accumulation, global-norm clipping and AdamW. Optionally
 * owns a linear head [vocab, d_model] + bias for softmax cross-entropy. Each sequence starts from a zero
 * state unless burnIn/setStartState prepared one for the next forward; the start state gets a gradient only
 * with setStateGradients(true) (truncated BPTT otherwise), and setEndStateGradient lets a gradient flow back
 * from the next window, so a long stream trains window by window exactly as one backward through time.
 * A language model (vocab_size > 0) trains on token ids with its own lm_head: stepTokens / evalTokens.
 *
 * Trainable tensors are indexed like the Model's parameters, then (with a head) lm_head.weight and
 * lm_head.bias. Gradients accumulate over backward calls until optimizerStep() (or a call with
 * apply = true) uses and clears them. Not thread-safe, and the Model must outlive the Trainer.
 */
class MAMBA_API Trainer {
public:
    Trainer(Model& model, int batch, int seqLen);
    ~Trainer();
    Trainer(const Trainer&) = delete;
    Trainer& operator=(const Trainer&) = delete;

    int batch() const;
    int seqLen() const;

    void setAdamW(const AdamWConfig& config);
    AdamWConfig adamW() const;
    void setLearningRate(float lr);
    float learningRate() const;
    /** Clips the global gradient norm to maxNorm before each optimizer step; <= 0 disables (default). */
    void setClipGradNorm(float maxNorm);
    float clipGradNorm() const;
    /**
     * Whole-step graphs (CUDA; ignored elsewhere): stepMse and stepTokens with apply = true run forward, loss,
     * backward, clipping and AdamW as one captured CUDA graph from their second call with the same settings on,
     * bit-identical to the eager step. Not with state carry (a start state, state gradients or an end-state
     * gradient: those steps run eagerly). Off by default.
     */
    void setStepGraphs(bool on);
    bool stepGraphs() const;
    /** Why step graphs turned themselves off (a capture failed), or empty. */
    std::string stepGraphsOffReason() const;
    /**
     * Turns dynamic loss scaling on (config.enabled) or off; the scale restarts at init_scale with no clean steps
     * counted. Change it only between optimizer steps (accumulated gradients carry the scale they were made with).
     */
    void setLossScaler(const LossScalerConfig& config);
    LossScalerConfig lossScaler() const;
    /** The scale of the next backward (1 without a scaler) and the applied steps in a row since it last changed. */
    float lossScale() const;
    int64_t lossScalerCleanSteps() const;
    /** Restores a scaler's state (e.g. on resume): scale finite and > 0, cleanSteps >= 0. */
    void setLossScalerState(float scale, int64_t cleanSteps);

    /** Adds a linear head [vocab, d_model] + bias (U(±1/√d_model), bias 0) for cross-entropy. Once. */
    void addHead(int vocab, int64_t seed);
    /** The cross-entropy head's vocabulary, or 0 (none, or an output head). */
    int headVocab() const;
    /**
     * Adds a linear output head [width, d_model] + bias (U(±1/√d_model), bias 0; trainable tensors
     * regression_head.weight / regression_head.bias): from then on forward, backward, step and stepMse work on its
     * outputs y · Wᵀ + b, [batch, seqLen, width] (e.g. width 1 for a scalar target). Once, and not with addHead.
     */
    void addRegressionHead(int width, int64_t seed);
    /** Floats per output position of forward/backward/step/stepMse: the output head's width, or d_model. */
    int outputWidth() const;

    int paramCount() const;
    std::string paramName(int index) const;
    int64_t paramSize(int index) const;
    /** Whether AdamW's weight decay applies to a tensor (default: not for norms, biases, A_log, D, the token embedding). */
    void setWeightDecay(int index, bool decay);
    bool weightDecay(int index) const;
    void readParam(int index, float* dst, int64_t dstLength) const;
    void writeParam(int index, const float* src, int64_t srcLength);
    /** The accumulated gradient of a tensor (zero right after an optimizer step). */
    void readGrad(int index, float* dst, int64_t dstLength) const;
    /** AdamW moments: which = 0 for m (exp_avg), 1 for v (exp_avg_sq). */
    void readMoment(int which, int index, float* dst, int64_t dstLength) const;
    void writeMoment(int which, int index, const float* src, int64_t srcLength);
    int64_t stepCount() const;
    void setStepCount(int64_t steps);
    /** Discards the accumulated gradients. */
    void zeroGrad();
    /** Floats in the flat gradient: every trainable tensor's size, in index order (no padding). */
    int64_t gradientLength() const;
    /** The accumulated gradient of every tensor, concatenated in index order (data-parallel exchange). */
    void readGradients(float* dst, int64_t dstLength) const;
    /** Replaces the accumulated gradient of every tensor (the layout of readGradients). */
    void writeGradients(const float* src, int64_t srcLength);

    /** Runs x [batch, steps, inputWidth] from a zero state with no tape; the next forward starts from the result. */
    void burnIn(const float* x, int64_t xLength, int steps);
    /** The next forward starts from a copy of `state` (same model, batch rows). */
    void setStartState(const State& state);
    /** Copies the state reached at the end of the last forward into `state`. */
    void readEndState(State& state) const;
    /**
     * With on, every backward also computes ∂L/∂(the state its forward started from) — every part of the state
     * row the forward reads (Mamba-1: conv history and h; Mamba-3: S, k_prev, v_prev and the angles) — for
     * readStartStateGradient. Off (default): that gradient is dropped (truncated BPTT), the cheaper backward.
     */
    void setStateGradients(bool on);
    bool stateGradients() const;
    /**
     * The next backward (any kind) treats `gradient` (a State of this model with batch rows, the state's row
     * layout) as ∂L/∂(the state its forward ended in), added to what flows back through time, in the same
     * scale as that backward's output gradient (e.g. the start-state gradient of the following window). Once.
     */
    void setEndStateGradient(const State& gradient);
    /** ∂L/∂(start state) of the last backward, in the state's row layout (needs setStateGradients(true)). */
    void readStartStateGradient(State& into) const;

    /** Training forward: x [batch, seqLen, inputWidth] → y [batch, seqLen, outputWidth()]; keeps the tape. */
    void forward(const float* x, int64_t xLength, float* y, int64_t yLength);
    /**
     * Backward of the last forward with dy [batch, seqLen, outputWidth()] multiplied by `scale`; gradients add
     * up. With apply it then runs the optimizer step.
     */
    StepStats backward(const float* dy, int64_t dyLength, float scale, bool apply);
    /** Clip + AdamW with the accumulated gradients, then clears them. */
    StepStats optimizerStep();
    /** forward + backward (+ optimizer step when apply); bit-identical to the split calls. */
    StepStats step(const float* x, int64_t xLength, const float* dy, int64_t dyLength, float scale, bool apply);
    /** forward + mean-squared-error against target [batch, seqLen, outputWidth()] + backward (+ step). */
    StepStats stepMse(const float* x, int64_t xLength, const float* target, int64_t targetLength, float scale,
                      bool apply);
    /**
     * forward + head + softmax cross-entropy against targets [batch, seqLen] (mean over the positions whose
     * target is not ignoreIndex) + backward (+ step). Logits stay in native memory.
     */
    StepStats stepCrossEntropy(const float* x, int64_t xLength, const int* targets, int64_t targetLength,
                               int ignoreIndex, float scale, bool apply);
    /** Cross-entropy loss and accuracy with no gradients (clears any pending forward). */
    StepStats evalCrossEntropy(const float* x, int64_t xLength, const int* targets, int64_t targetLength,
                               int ignoreIndex);
    /** ∂L/∂x of the last backward, [batch, seqLen, inputWidth] (models with float inputs). */
    void readInputGradient(float* dst, int64_t dstLength) const;

    // ---- language models (vocab_size > 0) ----
    /**
     * Next-token training of a language model: token ids [batch, seqLen] → embedding → backbone → the model's
     * lm_head (tied or not) → softmax cross-entropy against targets [batch, seqLen] (normally the ids shifted
     * by one; ignoreIndex marks positions that do not count, e.g. padding) → backward into every tensor, the
     * embedding included (a tied embedding gets both terms) (+ the optimizer step when apply). The loss is the
     * mean over the positions whose target is not ignoreIndex (PyTorch's reduction='mean'); the gradient is
     * that of scale · loss. The logits are computed in blocks of rows and never all at once. Ids must be in
     * [0, vocab), targets in [0, vocab) or equal to ignoreIndex (std::out_of_range otherwise). The float-input
     * calls (forward, backward, step, stepMse, stepCrossEntropy, burnIn, readInputGradient, addHead) refuse a
     * language model with std::logic_error.
     */
    StepStats stepTokens(const int32_t* ids, int64_t idsLength, const int32_t* targets, int64_t targetsLength,
                         int ignoreIndex, float scale, bool apply);
    /** Loss and accuracy of stepTokens with no gradients (clears any pending forward). */
    StepStats evalTokens(const int32_t* ids, int64_t idsLength, const int32_t* targets, int64_t targetsLength,
                         int ignoreIndex);
    /**
     * Split form, for a loss computed by the caller: the training forward of ids [batch, seqLen] → every
     * position's logits [batch, seqLen, vocab] (host; they do exist at once here), keeping the tape.
     */
    void forwardTokens(const int32_t* ids, int64_t idsLength, float* logits, int64_t logitsLength);
    /** Backward of the last forwardTokens with dlogits [batch, seqLen, vocab] times scale; gradients add up (+ step). */
    StepStats backwardLogits(const float* dlogits, int64_t dlogitsLength, float scale, bool apply);

private:
    friend class NcclComm;  // sums the gradient buffers in device memory
    class Impl;
    Impl* impl_;
};

// ---- data-parallel collectives over NCCL (collective_api.cpp) ----

/** Bytes of an NCCL unique id (NCCL_UNIQUE_ID_BYTES). */
MAMBA_API int ncclUniqueIdSize();
/** Why NCCL cannot be used ("" when libnccl.so.2 loads and libmamba has CUDA). Never throws. */
MAMBA_API std::string ncclUnavailableReason();
/** A fresh NCCL unique id (ncclGetUniqueId), ncclUniqueIdSize() bytes, for rank 0 to hand to every rank. */
MAMBA_API void ncclNewUniqueId(signed char* dst, int64_t dstLength);

/**
 * One rank of an NCCL communicator on one CUDA device (libnccl.so.2 is loaded at run time). Construction
 * blocks until every rank of the clique joined (ncclCommInitRank), so the ranks of one process construct
 * theirs on separate threads. Every collective waits for its result and fails with std::runtime_error
 * ("timed out") when it does not finish within the timeout: the communicator is then aborted and unusable.
 */
class MAMBA_API NcclComm {
public:
    NcclComm(const signed char* id, int64_t idLength, int worldSize, int rank, int device, int64_t timeoutMillis);
    ~NcclComm();
    NcclComm(const NcclComm&) = delete;
    NcclComm& operator=(const NcclComm&) = delete;

    int rank() const;
    int worldSize() const;
    int device() const;
    /**
     * Replaces the trainer's accumulated gradient (a trainer on this device) by the sum over the ranks. rankOrder:
     * all-gather every rank's gradient, then add them in rank order, ((g0 + g1) + g2) + … per element, on every
     * rank — the bits do not depend on the topology; otherwise ncclAllReduce (less traffic, NCCL's order).
     */
    void sumGradients(Trainer& trainer, bool rankOrder);
    /** gathered[r·n + i] = rank r's local[i] (small host arrays; staged through device memory). */
    void allGather(const double* local, int64_t n, double* gathered, int64_t gatheredLength);
    /** Every rank's data becomes root's (host array, staged through device memory). */
    void broadcast(float* data, int64_t n, int root);
    /** Aborts the communicator (ncclCommAbort): pending and later collectives fail. Idempotent. */
    void abort();

private:
    class Impl;
    Impl* impl_;
};

}  // namespace mamba
