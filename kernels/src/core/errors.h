// Error helpers. Messages are what Java users read: name the argument, the value and the limit.
//
// The kind of an error travels as a tag at the start of its message, because JavaCPP keeps only what():
//   "invalid argument: "  std::invalid_argument  → IllegalArgumentException (InvalidConfigException for configs)
//   "out of range: "      std::out_of_range      → IllegalArgumentException
//   "illegal state: "     std::logic_error       → IllegalStateException (a call out of order)
//   "out of memory: "     OutOfMemoryError       → OutOfDeviceMemoryException
//   "no CUDA device…"     std::runtime_error     → DeviceUnavailableException
// Anything else (CUDA failures, internal logic errors) becomes a MambaException. See NativeErrors.java.
#pragma once

#include <stdexcept>
#include <string>

namespace mamba {

/** Device (or host) allocation failure; the Java layer maps it to OutOfDeviceMemoryException. */
class OutOfMemoryError : public std::runtime_error {
public:
    explicit OutOfMemoryError(const std::string& what) : std::runtime_error("out of memory: " + what) {}
};

[[noreturn]] inline void fail(const std::string& message) { throw std::invalid_argument("invalid argument: " + message); }

[[noreturn]] inline void failRange(const std::string& message) { throw std::out_of_range("out of range: " + message); }

/** A call made out of order (a backward without its forward, …). */
[[noreturn]] inline void failState(const std::string& message) { throw std::logic_error("illegal state: " + message); }

inline void require(bool ok, const std::string& message) {
    if (!ok) fail(message);
}

/** Checks that a caller's buffer holds exactly `expected` floats. */
inline void requireLength(const char* what, int64_t got, int64_t expected) {
    if (got != expected)
        fail(std::string(what) + " has " + std::to_string(got) + " floats, expected " + std::to_string(expected));
}

}  // namespace mamba
