// ibv_reg_mr's error, with the memlock limit (ulimit -l) that it pins against.
#pragma once

#include "errors.hpp"

#include <sys/resource.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>

namespace tutorial {

//! [memlock]
// "64 KiB" or "unlimited": the soft RLIMIT_MEMLOCK that ibv_reg_mr pins against.
[[nodiscard]] inline std::string memlock_limit_text() {
    rlimit limit{};
    if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) {
        return "unknown";
    }
    if (limit.rlim_cur == RLIM_INFINITY) {
        return "unlimited";
    }
    return std::to_string(limit.rlim_cur / 1024) + " KiB";
}

// ibv_reg_mr pins the pages; without CAP_IPC_LOCK the pinned total must fit in ulimit -l,
// and the kernel answers ENOMEM when it does not.
[[noreturn]] inline void throw_reg_mr_error(int err, std::size_t bytes) {
    const std::string message = std::string("ibv_reg_mr: ") + std::strerror(err) +
                                " (registering " + std::to_string(bytes) + " bytes)";
    if (err == ENOMEM) {
        throw TutorialError(kExitRdma, message,
                            "the memlock limit (ulimit -l, now " + memlock_limit_text() +
                                ") is too low to pin " + std::to_string(bytes) +
                                " bytes: raise it with ulimit -l unlimited or in "
                                "/etc/security/limits.conf");
    }
    throw TutorialError(kExitRdma, message);
}
//! [memlock]

}  // namespace tutorial
