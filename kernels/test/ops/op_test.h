// The backend-ops test harness: one table of op cases (op_cases.cpp), run on every backend through `Ops&`
// only, each compared with a plain double-precision reference (reference.h). The same table is timed by
// `op_test --time`. Nothing in here knows which backend it talks to: memory moves through Ops::alloc /
// upload / download, and capabilities() decides which cases apply.
#pragma once

#include "core/backends.h"
#include "ops/ops.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace optest {

using namespace mamba;

// ---------------------------------------------------------------- random inputs

/** SplitMix64: small, fast, and the same stream on every machine. */
class Rng {
public:
    explicit Rng(uint64_t seed) : state_(seed) {}
    uint64_t bits() {
        uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    /** Uniform in [0, 1). */
    double unit() { return static_cast<double>(bits() >> 11) * 0x1.0p-53; }
    double uniform(double lo, double hi) { return lo + (hi - lo) * unit(); }
    /** Uniform integer in [0, n). */
    int below(int n) { return static_cast<int>(unit() * n); }

private:
    uint64_t state_;
};

/** n floats uniform in [lo, hi); never exactly zero (a zero is nudged), so no product hides a bug. */
std::vector<float> uniform(Rng& rng, int64_t n, double lo, double hi);
/** softplus⁻¹ of Δ0 drawn log-uniformly in [0.001, 0.1], the official dt_proj bias initialisation. */
float dtBias(Rng& rng);

// ---------------------------------------------------------------- 16-bit storage types (host side)

/** f32 → bf16/f16 bits, round to nearest even (by searching the 16-bit grid, see reference.cpp). */
uint16_t roundToHalf(float x, int dtype);
/** bf16/f16 bits → exact value. */
float halfToFloat(uint16_t bits, int dtype);
/** f32 → TF32 (10 explicit mantissa bits), round to nearest even; the result is still an f32 value. */
float roundToTf32(float x);
const char* dtypeName(int dtype);

// ---------------------------------------------------------------- backend memory

/** The quiet NaN every output buffer is filled with before an op runs (a fixed payload, checked bitwise). */
constexpr uint32_t kPoisonBits = 0x7FC0DEADu;
float poisonValue();
inline uint32_t floatBits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

/** Buffers of one case on one backend; all released when the case's last reference goes. */
class Arena {
public:
    explicit Arena(Ops& ops) : ops_(ops) {}
    ~Arena();
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;
    Ops& ops() { return ops_; }

    float* put(const std::vector<float>& host);                 // alloc + upload
    float* poisoned(int64_t n);                                 // alloc + fill with kPoisonBits
    void* putHalf(const std::vector<uint16_t>& bits);           // 2-byte storage ((n + 1) / 2 floats)
    void* poisonedHalf(int64_t n);                              // 2-byte buffer filled with 0xDEAD
    int32_t* putInts(const std::vector<int32_t>& ints);         // int32 in a float buffer
    void set(float* dst, const std::vector<float>& host);       // upload into an existing buffer
    std::vector<float> get(const float* src, int64_t n);        // synchronize + download
    std::vector<uint16_t> getHalf(const void* src, int64_t n);

private:
    float* alloc(int64_t n);
    Ops& ops_;
    std::vector<float*> owned_;
};

// ---------------------------------------------------------------- comparisons

/** One output compared with its reference. err and tol are in the unit of `metric`. */
struct Compare {
    std::string what;    // the output ("y", "dw", "ckpt" …)
    std::string metric;  // "nmax": max|got − ref| / max|ref|;  "rel": max |got − ref| / |ref|;  "bits": differing values
    double err = 0, tol = 0;
    bool ok() const { return err <= tol; }  // NaN err fails
};

/** max|got − ref| / max|ref| over all values; a non-finite got where ref is finite gives +inf. */
Compare nmax(const std::string& what, const std::vector<float>& got, const std::vector<double>& ref, double tol);
/** Elementwise max |got − ref| / |ref| (for values bounded away from zero). */
Compare rel(const std::string& what, const std::vector<float>& got, const std::vector<double>& ref, double tol);
/** A scalar's relative error. */
Compare relScalar(const std::string& what, double got, double ref, double tol);
/** Bit-for-bit: err = number of values whose bit patterns differ (tol 0). */
Compare bits(const std::string& what, const std::vector<float>& got, const std::vector<float>& want);
/** Central differences of loss() over every element of v (each restored afterwards), step h: a double gradient. */
std::vector<double> centralDifferences(std::vector<double>& v, const std::function<double()>& loss, double h = 1e-6);
Compare bits16(const std::string& what, const std::vector<uint16_t>& got, const std::vector<uint16_t>& want);

/** The [rows, width] block of a [rows, ld] buffer. */
std::vector<float> strip(const std::vector<float>& v, int64_t rows, int64_t ld, int64_t width);
/** The same block in double, for the reference. */
std::vector<double> dense(const std::vector<float>& v, int64_t rows, int64_t ld, int64_t width);
std::vector<double> toDouble(const std::vector<float>& v);
/** Columns [width, ld) of every row must still hold the poison: err = values that changed. */
Compare padding(const std::string& what, const std::vector<float>& v, int64_t rows, int64_t ld, int64_t width);

// ---------------------------------------------------------------- cases

/** What a case needs of a backend, beyond the inference stages every backend has. */
enum Need : unsigned { NEED_NONE = 0, NEED_TRAINING = 1, NEED_LOWP = 2, NEED_HOST_THREADS = 4, NEED_GRAPHS = 8 };

/** A case made ready on one backend: inputs uploaded, outputs poisoned. */
struct Prepared {
    std::shared_ptr<Arena> arena;
    /** The op under test, through Ops& only (re-run for timing). Empty for check-only cases. */
    std::function<void()> call;
    /** After exactly one call: downloads the outputs and compares them with the reference. */
    std::function<std::vector<Compare>()> check;
    /** Every output the op wrote, downloaded (for the determinism cases; may be empty). */
    std::function<std::vector<std::vector<float>>()> outputs;
    double bytes = 0;  // memory the op must move at least, for GB/s (0: not meaningful)
    double flops = 0;  // for GFLOP/s (0: not meaningful)
};

struct Case {
    std::string op;       // "gemm.forward", "selectiveScan", "det.threads.adamw" …
    std::string shape;    // the sizes and flags that tell this case from its neighbours
    int dtype = DTYPE_F32;
    std::string mode;     // "fast", "repro" or "-"
    unsigned needs = NEED_NONE;
    bool big = false;     // realistic sizes: run by --time or --big, not by the default check run
    std::function<Prepared(Ops&, uint64_t seed)> prepare;
};

/** The table (op_cases.cpp). */
std::vector<Case> allCases();
/** The Mamba-3 cases (op_cases_mamba3.cpp), and the training ops among them that get determinism cases. */
std::vector<Case> mamba3Cases();
std::vector<Case> mamba3TrainingCases();
/** The token sampler's cases (op_cases_sampling.cpp). */
std::vector<Case> samplingCases();
}  // namespace optest
namespace mamba::sampling { struct RowParams; }
namespace optest {
/** The plain reference sampler of one row (op_cases_sampling.cpp); also the reference backend's op. */
int32_t referenceSampleRow(const float* x, int vocab, const mamba::sampling::RowParams& rp, uint64_t& rng,
                           uint32_t* seen, int32_t& errIndex);

/** Checks of the references themselves (central differences), no backend involved (reference.cpp). */
struct SelfCheck {
    std::string name, shape;
    std::function<std::vector<Compare>()> run;
};
std::vector<SelfCheck> referenceSelfChecks();

}  // namespace optest
