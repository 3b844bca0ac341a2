// Error helpers. Messages are what Java users read: name the argument, the value and the limit.
#pragma once

#include <stdexcept>
#include <string>

namespace mamba {

/** Device (or host) allocation failure; the Java layer maps it to OutOfDeviceMemoryException. */
class OutOfMemoryError : public std::runtime_error {
public:
    explicit OutOfMemoryError(const std::string& what) : std::runtime_error("out of memory: " + what) {}
};

[[noreturn]] inline void fail(const std::string& message) { throw std::invalid_argument(message); }

inline void require(bool ok, const std::string& message) {
    if (!ok) fail(message);
}

/** Checks that a caller's buffer holds exactly `expected` floats. */
inline void requireLength(const char* what, int64_t got, int64_t expected) {
    if (got != expected)
        fail(std::string(what) + " has " + std::to_string(got) + " floats, expected " + std::to_string(expected));
}

}  // namespace mamba
