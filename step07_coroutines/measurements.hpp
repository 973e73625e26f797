// What the client measures: latency statistics, the --latency-file, and CPU time.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "options.hpp"

namespace tutorial {

struct LatencyStats {
    double min = 0, max = 0, typical = 0, average = 0, stdev = 0, p99 = 0, p999 = 0;
};

/// One-way latencies (half round trips) in microseconds, as ib_send_lat
/// reports them: typical is the median; percentiles by nearest rank.
inline LatencyStats compute_latency_stats(std::vector<double> samples) {
    LatencyStats s;
    if (samples.empty()) {
        return s;
    }
    std::sort(samples.begin(), samples.end());
    const std::size_t n = samples.size();
    auto rank = [&](double p) {
        const auto r = static_cast<std::size_t>(std::ceil(p * static_cast<double>(n)));
        return samples[std::min(n - 1, r == 0 ? 0 : r - 1)];
    };
    s.min = samples.front();
    s.max = samples.back();
    s.typical = samples[n / 2];
    double sum = 0;
    for (double v : samples) {
        sum += v;
    }
    s.average = sum / static_cast<double>(n);
    double sq = 0;
    for (double v : samples) {
        sq += (v - s.average) * (v - s.average);
    }
    s.stdev = std::sqrt(sq / static_cast<double>(n));
    s.p99 = rank(0.99);
    s.p999 = rank(0.999);
    return s;
}

inline void print_latency_table(std::size_t size, std::size_t iters, const LatencyStats& s) {
    std::printf(
        " #bytes #iterations t_min[usec] t_max[usec] t_typical[usec] t_avg[usec] "
        "t_stdev[usec] 99%% percentile[usec] 99.9%% percentile[usec]\n");
    std::printf(" %-6zu %-11zu %-11.2f %-11.2f %-15.2f %-11.2f %-13.2f %-19.2f %.2f\n", size, iters,
                s.min, s.max, s.typical, s.average, s.stdev, s.p99, s.p999);
}

// ------------------------------------------------------------- --latency-file

//! [latency_file]
/// The text of a --latency-file, the format steps 04 to 06 share: '# ' comment
/// lines, then one measured iteration per line, one-way microseconds with 3
/// decimals (the samples the latency table summarises, in the order measured).
inline std::string latency_file_text(const std::string& mode, std::size_t size,
                                     std::span<const double> one_way_us) {
    std::string text = std::string("# label: ") + kStepLabel + " " + mode +
                       "\n# program: " + kProgram + "\n# size: " + std::to_string(size) +
                       "\n# iterations: " + std::to_string(one_way_us.size()) +
                       "\n# unit: usec one-way (round trip / 2)\n";
    char line[64];
    for (const double us : one_way_us) {
        const int n = std::snprintf(line, sizeof line, "%.3f\n", us);
        text.append(line, static_cast<std::size_t>(std::clamp(n, 0, int{sizeof line} - 1)));
    }
    return text;
}

struct FileCloser {
    void operator()(std::FILE* file) const noexcept { std::fclose(file); }
};
using OutputFile = std::unique_ptr<std::FILE, FileCloser>;

/// Opens --latency-file for writing; a path that cannot be opened is a usage
/// error, found before any RDMA resource exists.
inline OutputFile open_latency_file(const std::string& path) {
    OutputFile file(std::fopen(path.c_str(), "w"));
    if (!file) {
        throw UsageError("cannot open --latency-file '" + path + "': " + std::strerror(errno));
    }
    return file;
}

inline void write_latency_file(OutputFile file, const std::string& text) {
    const bool written = std::fwrite(text.data(), 1, text.size(), file.get()) == text.size();
    if (!written || std::fclose(file.release()) != 0) {
        throw std::system_error(errno, std::generic_category(), "writing --latency-file");
    }
}
//! [latency_file]

struct CpuUsage {
    double user_s = 0, system_s = 0;
    long voluntary = 0, involuntary = 0;
};

inline CpuUsage cpu_usage() {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    CpuUsage c;
    c.user_s = static_cast<double>(usage.ru_utime.tv_sec) +
               static_cast<double>(usage.ru_utime.tv_usec) / 1e6;
    c.system_s = static_cast<double>(usage.ru_stime.tv_sec) +
                 static_cast<double>(usage.ru_stime.tv_usec) / 1e6;
    c.voluntary = usage.ru_nvcsw;
    c.involuntary = usage.ru_nivcsw;
    return c;
}

}  // namespace tutorial
