// Exit codes, and the two error types every step throws and main() catches.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace tutorial {

//! [exit_codes]
constexpr int kExitOk = 0, kExitRdma = 1, kExitUsage = 2, kExitNoDevice = 3, kExitNoProvider = 4,
              kExitNoSuchDevice = 5, kExitPeer = 6, kExitTimeout = 7, kExitInterrupted = 130;
//! [exit_codes]

//! [errors]
// A bad option or value: main() prints it with the usage text and exits with kExitUsage.
class UsageError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// Everything that is not a failing verb: no device, no provider, unknown device or port, ...
class TutorialError : public std::runtime_error {
  public:
    TutorialError(int exit_code, const std::string& message, std::string hint = {})
        : std::runtime_error(message), exit_code_(exit_code), hint_(std::move(hint)) {}
    [[nodiscard]] int exit_code() const noexcept { return exit_code_; }
    [[nodiscard]] const std::string& hint() const noexcept { return hint_; }

  private:
    int exit_code_;
    std::string hint_;
};
//! [errors]

}  // namespace tutorial
