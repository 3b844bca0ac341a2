// Backend memory through the Ops interface, and the comparisons every case reports.
#include "op_test.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace optest {

float poisonValue() {
    float f;
    std::memcpy(&f, &kPoisonBits, 4);
    return f;
}

// ---------------------------------------------------------------- Arena

Arena::~Arena() {
    for (float* p : owned_) ops_.release(p);
}

float* Arena::alloc(int64_t n) {
    float* p = ops_.alloc(std::max<int64_t>(n, 1));
    owned_.push_back(p);
    return p;
}

float* Arena::put(const std::vector<float>& host) {
    float* p = alloc(static_cast<int64_t>(host.size()));
    if (!host.empty()) ops_.upload(p, host.data(), static_cast<int64_t>(host.size()));
    return p;
}

float* Arena::poisoned(int64_t n) { return put(std::vector<float>(static_cast<size_t>(std::max<int64_t>(n, 1)), poisonValue())); }

void* Arena::putHalf(const std::vector<uint16_t>& bits) {
    // 2-byte storage lives in (n + 1) / 2 floats; the bits travel as floats (uploads copy bytes).
    std::vector<float> packed((bits.size() + 1) / 2, 0.f);
    if (!bits.empty()) std::memcpy(packed.data(), bits.data(), bits.size() * 2);
    return put(packed);
}

void* Arena::poisonedHalf(int64_t n) { return putHalf(std::vector<uint16_t>(static_cast<size_t>(n), 0xDEADu)); }

int32_t* Arena::putInts(const std::vector<int32_t>& ints) {
    std::vector<float> packed(ints.size());
    if (!ints.empty()) std::memcpy(packed.data(), ints.data(), ints.size() * 4);
    return reinterpret_cast<int32_t*>(put(packed));
}

void Arena::set(float* dst, const std::vector<float>& host) {
    ops_.upload(dst, host.data(), static_cast<int64_t>(host.size()));
}

std::vector<float> Arena::get(const float* src, int64_t n) {
    ops_.synchronize();
    std::vector<float> v(static_cast<size_t>(n));
    if (n > 0) ops_.download(v.data(), src, n);
    return v;
}

std::vector<uint16_t> Arena::getHalf(const void* src, int64_t n) {
    const std::vector<float> packed = get(static_cast<const float*>(src), (n + 1) / 2);
    std::vector<uint16_t> bits(static_cast<size_t>(n));
    if (n > 0) std::memcpy(bits.data(), packed.data(), static_cast<size_t>(n) * 2);
    return bits;
}

// ---------------------------------------------------------------- comparisons

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}

Compare nmax(const std::string& what, const std::vector<float>& got, const std::vector<double>& ref, double tol) {
    Compare c{what, "nmax", 0, tol};
    if (got.size() != ref.size()) {
        c.err = kInf;
        return c;
    }
    double diff = 0, mag = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        mag = std::max(mag, std::fabs(ref[i]));
        if (!std::isfinite(got[i]) && std::isfinite(ref[i])) {
            c.err = kInf;
            return c;
        }
        diff = std::max(diff, std::fabs(got[i] - ref[i]));
    }
    c.err = mag > 0 ? diff / mag : diff;
    return c;
}

Compare rel(const std::string& what, const std::vector<float>& got, const std::vector<double>& ref, double tol) {
    Compare c{what, "rel", 0, tol};
    if (got.size() != ref.size()) {
        c.err = kInf;
        return c;
    }
    for (size_t i = 0; i < got.size(); ++i) {
        if (!std::isfinite(got[i])) {
            c.err = kInf;
            return c;
        }
        const double e = std::fabs(got[i] - ref[i]);
        c.err = std::max(c.err, ref[i] != 0 ? e / std::fabs(ref[i]) : e);
    }
    return c;
}

Compare relScalar(const std::string& what, double got, double ref, double tol) {
    Compare c{what, "rel", 0, tol};
    c.err = std::isfinite(got) ? std::fabs(got - ref) / std::max(std::fabs(ref), 1e-300) : kInf;
    return c;
}

std::vector<double> centralDifferences(std::vector<double>& v, const std::function<double()>& loss, double h) {
    std::vector<double> g(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
        const double x = v[i];
        v[i] = x + h;
        const double lp = loss();
        v[i] = x - h;
        const double lm = loss();
        v[i] = x;
        g[i] = (lp - lm) / (2 * h);
    }
    return g;
}

Compare bits(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
    Compare c{what, "bits", 0, 0};
    if (got.size() != want.size()) {
        c.err = kInf;
        return c;
    }
    for (size_t i = 0; i < got.size(); ++i) c.err += floatBits(got[i]) != floatBits(want[i]);
    return c;
}

Compare bits16(const std::string& what, const std::vector<uint16_t>& got, const std::vector<uint16_t>& want) {
    Compare c{what, "bits", 0, 0};
    if (got.size() != want.size()) {
        c.err = kInf;
        return c;
    }
    for (size_t i = 0; i < got.size(); ++i) c.err += got[i] != want[i];
    return c;
}

std::vector<float> strip(const std::vector<float>& v, int64_t rows, int64_t ld, int64_t width) {
    std::vector<float> out(static_cast<size_t>(rows * width));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < width; ++j) out[r * width + j] = v[r * ld + j];
    return out;
}

std::vector<double> dense(const std::vector<float>& v, int64_t rows, int64_t ld, int64_t width) {
    std::vector<double> out(static_cast<size_t>(rows * width));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < width; ++j) out[r * width + j] = v[r * ld + j];
    return out;
}

std::vector<double> toDouble(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

Compare padding(const std::string& what, const std::vector<float>& v, int64_t rows, int64_t ld, int64_t width) {
    Compare c{what + ".pad", "bits", 0, 0};
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = width; j < ld; ++j) c.err += floatBits(v[r * ld + j]) != kPoisonBits;
    return c;
}

}  // namespace optest
