// --latency-file: the samples of a run, one per line, for plotting.
#pragma once

#include "errors.hpp"
#include "options.hpp"
#include "verbs_raii.hpp"
#include "wire_format.hpp"

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

namespace tutorial {

//! [latency_file]
// --latency-file: the samples behind the table, for plotting. A few "# " lines say what they
// are; then one line per sample, in the order they were taken: one way (round trip / 2) in usec.
// A sample is the time from one send to the next, so -n iterations give -n - 1 lines, the count
// that "# iterations" gives.
[[nodiscard]] inline std::string latency_file_text(std::string_view label, std::size_t size,
                                                   std::span<const double> round_trips_usec) {
    std::string text = "# label: " + std::string(label) + "\n# program: " + kProgram +
                       "\n# size: " + std::to_string(size) +
                       "\n# iterations: " + std::to_string(round_trips_usec.size()) +
                       "\n# unit: usec one-way (round trip / 2)\n";
    char line[32];
    for (const double round_trip : round_trips_usec) {
        std::snprintf(line, sizeof line, "%.3f\n", round_trip / 2);
        text += line;
    }
    return text;
}

struct FileCloser {
    void operator()(std::FILE* file) const noexcept { std::fclose(file); }
};
using OutputFile = std::unique_ptr<std::FILE, FileCloser>;

// Opened before any RDMA resource exists: a path that cannot be written is a usage error, found
// before the run rather than lost after it.
[[nodiscard]] inline OutputFile open_latency_file(const std::string& path) {
    if (path.empty()) { return nullptr; }
    OutputFile file(std::fopen(path.c_str(), "w"));
    if (!file) {
        throw UsageError("cannot open --latency-file '" + path + "': " + std::strerror(errno));
    }
    return file;
}

inline void write_latency_file(std::FILE* file, const std::string& path, const std::string& text) {
    if (std::fputs(text.c_str(), file) == EOF || std::fflush(file) != 0) {
        throw std::system_error(errno, std::generic_category(), "writing --latency-file " + path);
    }
}
//! [latency_file]

}  // namespace tutorial
