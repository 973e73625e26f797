// The program's name, its options and their parser.
#pragma once

#include "errors.hpp"
#include "option_parser.hpp"

#include <getopt.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace tutorial {

constexpr const char* kProgram = "step02_resources";

//! [parse_options]
// A buffer larger than this is a typo, not a tutorial exercise.
constexpr long long kMaxBufferSize = 1LL << 30;
constexpr long long kMaxDepth = 1LL << 24;

struct Options {
    std::string device_name;  // empty: the first device
    int ib_port = 1;
    std::size_t size = 4096;
    int rx_depth = 500;
    int tx_depth = 16;
    bool help = false;
};

[[nodiscard]] inline std::string usage_text() {
    return std::string("usage: ") + kProgram +
           " [options]\n"
           "Creates a buffer, PD, MR, CQ and RC QP, moves the QP to INIT, prints them and tears\n"
           "them down in reverse order.\n"
           "  -d, --ib-dev=NAME    use this device (default: the first one found)\n"
           "  -i, --ib-port=N      use this port, 1-255 (default 1)\n"
           "  -s, --size=BYTES     buffer and MR size, 1-1073741824 (default 4096)\n"
           "  -r, --rx-depth=N     receive queue depth, 1-16777216 (default 500)\n"
           "  -t, --tx-depth=N     send queue depth, 1-16777216 (default 16)\n"
           "  -h, --help           print this help and exit\n";
}

// One option that getopt_long returned, stored in options; a bad value is a UsageError.
inline void apply_option(Options& options, int c, std::string_view value) {
    switch (c) {
        case 'd': options.device_name = value; break;
        case 'i':
            options.ib_port = static_cast<int>(parse_number(value, "--ib-port", 1, 255));
            break;
        case 's':
            options.size =
                static_cast<std::size_t>(parse_number(value, "--size", 1, kMaxBufferSize));
            break;
        case 'r':
            options.rx_depth = static_cast<int>(parse_number(value, "--rx-depth", 1, kMaxDepth));
            break;
        case 't':
            options.tx_depth = static_cast<int>(parse_number(value, "--tx-depth", 1, kMaxDepth));
            break;
        case 'h': options.help = true; break;
    }
}

[[nodiscard]] inline Options parse_options(int argc, char** argv) {
    static const option long_options[] = {{"ib-dev", required_argument, nullptr, 'd'},
                                          {"ib-port", required_argument, nullptr, 'i'},
                                          {"size", required_argument, nullptr, 's'},
                                          {"rx-depth", required_argument, nullptr, 'r'},
                                          {"tx-depth", required_argument, nullptr, 't'},
                                          {"help", no_argument, nullptr, 'h'},
                                          {nullptr, 0, nullptr, 0}};
    Options options;
    (void)parse_command_line(
        argc, argv, ":d:i:s:r:t:h", long_options, 0,
        [&](int c, std::string_view value) { apply_option(options, c, value); });
    return options;
}
//! [parse_options]

}  // namespace tutorial
