// The program's name, its options and their parser.
#pragma once

#include "errors.hpp"

#include <getopt.h>

#include <charconv>
#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>
#include <system_error>

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

// Parses a whole decimal number in [min, max]; anything else is a UsageError naming the option.
[[nodiscard]] inline long long parse_number(std::string_view text, const char* option,
                                            long long min, long long max) {
    long long value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || value < min ||
        value > max) {
        throw UsageError(std::string(option) + " must be a whole number from " +
                         std::to_string(min) + " to " + std::to_string(max) + " (got '" +
                         std::string(text) + "')");
    }
    return value;
}

// getopt's '?': an unknown option, or a long option given a value it does not take
// ("--check=1": getopt then sets optopt to that option's value, which is not a character).
[[nodiscard]] inline std::string unknown_option_text(char** argv) {
    const std::string arg = argv[optind - 1];
    const char* cluster = argv[optind];  // still the current argument inside "-xy"
    const bool in_cluster = cluster != nullptr && cluster[0] == '-' && cluster[1] != '-' &&
                            optopt > 0 && optopt < 0x80 && std::strchr(cluster + 1, optopt);
    if (optopt != 0 && !in_cluster && arg.rfind("--", 0) == 0 &&
        arg.find('=') != std::string::npos) {
        return "option '" + arg.substr(0, arg.find('=')) + "' takes no value";
    }
    if (optopt > 0 && optopt < 0x80) {
        return std::string("unknown option '-") + static_cast<char>(optopt) + "'";
    }
    return "unknown option '" + arg + "'";
}

// One option that getopt_long returned, stored in options; a bad value is a UsageError.
inline void apply_option(Options& options, int c, char** argv) {
    switch (c) {
        case 'd':
            options.device_name = optarg;
            break;
        case 'i':
            options.ib_port = static_cast<int>(parse_number(optarg, "--ib-port", 1, 255));
            break;
        case 's':
            options.size =
                static_cast<std::size_t>(parse_number(optarg, "--size", 1, kMaxBufferSize));
            break;
        case 'r':
            options.rx_depth = static_cast<int>(parse_number(optarg, "--rx-depth", 1, kMaxDepth));
            break;
        case 't':
            options.tx_depth = static_cast<int>(parse_number(optarg, "--tx-depth", 1, kMaxDepth));
            break;
        case 'h':
            options.help = true;
            break;
        case ':':
            throw UsageError(std::string("option '") + argv[optind - 1] + "' needs a value");
        default:
            throw UsageError(unknown_option_text(argv));
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
    opterr = 0;  // we print our own messages
    optind = 0;  // 0, not 1: glibc then fully restarts the scan (the unit tests parse many times)
    for (;;) {
        const int c = getopt_long(argc, argv, ":d:i:s:r:t:h", long_options, nullptr);
        if (c == -1) {
            break;
        }
        apply_option(options, c, argv);
    }
    if (optind < argc) {
        throw UsageError(std::string("unexpected argument '") + argv[optind] + "'");
    }
    return options;
}
//! [parse_options]

}  // namespace tutorial
