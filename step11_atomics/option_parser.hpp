// The option skeleton every step carries unchanged: the number parser, the text for an unknown
// option, and the getopt_long loop. Each step's options.hpp adds only its own options.
#pragma once

#include "errors.hpp"

#include <getopt.h>

#include <charconv>
#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace tutorial {

//! [option_parser]
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

// getopt_long over argv: each option goes to apply(option, value), value "" for an option that
// takes none. Returns the arguments after the options, at most max_operands of them. A missing
// value, an unknown option or one argument too many is a UsageError.
template <typename Apply>
[[nodiscard]] std::vector<std::string> parse_command_line(int argc, char** argv,
                                                          const char* short_options,
                                                          const option* long_options,
                                                          std::size_t max_operands, Apply apply) {
    opterr = 0;  // we print our own messages
    optind = 0;  // 0, not 1: glibc then fully restarts the scan (the unit tests parse many times)
    for (;;) {
        const int c = getopt_long(argc, argv, short_options, long_options, nullptr);
        if (c == -1) { break; }
        if (c == ':') {
            throw UsageError(std::string("option '") + argv[optind - 1] + "' needs a value");
        }
        if (c == '?') { throw UsageError(unknown_option_text(argv)); }
        apply(c, std::string_view(optarg != nullptr ? optarg : ""));
    }
    std::vector<std::string> operands(argv + optind, argv + argc);
    if (operands.size() > max_operands) {
        throw UsageError("unexpected argument '" + operands[max_operands] + "'");
    }
    return operands;
}
//! [option_parser]

}  // namespace tutorial
