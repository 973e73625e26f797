// The program's name, its options and their parser.
#pragma once

#include "errors.hpp"
#include "option_parser.hpp"

#include <getopt.h>

#include <string>
#include <string_view>

namespace tutorial {

constexpr const char* kProgram = "step01_devices";

//! [parse_options]
struct Options {
    std::string device_name;  // empty: every device
    int ib_port = 0;          // 0: every port
    bool verbose = false;
    bool help = false;
};

[[nodiscard]] inline std::string usage_text() {
    return std::string("usage: ") + kProgram +
           " [options]\n"
           "Lists the RDMA devices, their limits, ports and GID tables, and recommends a GID "
           "index.\n"
           "  -d, --ib-dev=NAME   only this device (default: every device)\n"
           "  -i, --ib-port=N     only this port, 1-255 (default: every port)\n"
           "  -v, --verbose       also print capability flags and more limits\n"
           "  -h, --help          print this help and exit\n";
}

// One option that getopt_long returned, stored in options; a bad value is a UsageError.
inline void apply_option(Options& options, int c, std::string_view value) {
    switch (c) {
        case 'd': options.device_name = value; break;
        case 'i':
            options.ib_port = static_cast<int>(parse_number(value, "--ib-port", 1, 255));
            break;
        case 'v': options.verbose = true; break;
        case 'h': options.help = true; break;
    }
}

[[nodiscard]] inline Options parse_options(int argc, char** argv) {
    static const option long_options[] = {{"ib-dev", required_argument, nullptr, 'd'},
                                          {"ib-port", required_argument, nullptr, 'i'},
                                          {"verbose", no_argument, nullptr, 'v'},
                                          {"help", no_argument, nullptr, 'h'},
                                          {nullptr, 0, nullptr, 0}};
    Options options;
    (void)parse_command_line(
        argc, argv, ":d:i:vh", long_options, 0,
        [&](int c, std::string_view value) { apply_option(options, c, value); });
    return options;
}
//! [parse_options]

}  // namespace tutorial
