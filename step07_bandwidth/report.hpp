// Step 07: ib_write_bw's table, from the timeline of one run: peak and average MB/s, Mpps.
#pragma once

#include "bandwidth.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>

namespace tutorial {

// perftest's peak: the fastest stretch from the i-th post (a list's first work request) to a
// later signaled completion j, per message: min over i, j of (completed[j] - posted[i]) / (j-i+1).
[[nodiscard]] inline double peak_seconds_per_message(const Timeline& t, std::uint64_t every,
                                                     std::uint64_t post_list) {
    const std::uint64_t n = t.messages;
    double best = static_cast<double>(t.last_completion - t.first_post);
    for (std::uint64_t i = 0; i < n; i += post_list) {
        const auto check = [&](std::uint64_t j) {
            best = std::min(best, static_cast<double>(t.completed[j] - t.posted[i]) /
                                      static_cast<double>(j - i + 1));
        };
        for (std::uint64_t j = (i + every) / every * every - 1; j < n; j += every) check(j);
        if (n % every != 0) check(n - 1);
    }
    return best * 1e-9;
}

inline void print_rule() {
    std::printf(
        "---------------------------------------------------------------------------------"
        "------\n");
}

inline void print_table_header() {
    print_rule();
    std::printf(
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n");
    std::fflush(stdout);
}

// One row, as ib_write_bw prints it: MB = 2^20 bytes; -D has no peak (0.00, as perftest).
inline void print_table_row(std::size_t size, const Timeline& t, std::uint64_t every,
                            std::uint64_t post_list) {
    constexpr double kMB = 1024.0 * 1024.0;
    const double seconds = static_cast<double>(t.last_completion - t.first_post) * 1e-9;
    const double bytes = static_cast<double>(size) * static_cast<double>(t.messages);
    const double peak = t.posted.empty() ? 0.0
                                         : static_cast<double>(size) /
                                               peak_seconds_per_message(t, every, post_list) / kMB;
    std::printf(" %-7zu    %-10" PRIu64 "       %-7.2f            %-7.2f\t\t     %-7.6f\n", size,
                t.messages, peak, bytes / seconds / kMB,
                static_cast<double>(t.messages) / seconds / 1e6);
    std::fflush(stdout);
}

}  // namespace tutorial
