// Latency figures as perftest computes them, and ibv_rc_pingpong's summary line.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace tutorial {

//! [stats]
// perftest's latency figures (ib_send_lat, print_report_lat), reproduced:
//  - one sample per iteration: the time between two consecutive sends, a full round trip;
//  - sorted, then the 2 largest samples are dropped (LAT_MEASURE_TAIL) from the count m;
//  - every figure is divided by rtt_factor: 2 where a sample is a round trip that the test
//    reports one way (ib_send_lat, ib_write_lat's ping-pong), 1 where the round trip is the
//    figure (ib_read_lat: a READ's post to completion);
//  - t_typical is the median of the first m samples;
//  - t_max is sample[m], 99% is sample[ceil(m * 0.99)], 99.9% is sample[ceil(m * 0.999)]:
//    indexes one past the nearest-rank position, as perftest does;
//  - t_stdev is the population standard deviation of the first m samples. (perftest keeps
//    each sample's deviation from t_avg in an int, dropping its fraction of a microsecond,
//    and squares that; we keep the fraction, so spreads under 1 us differ from perftest's.)
struct LatencyStats {
    std::size_t samples = 0;  // m
    double t_min = 0, t_max = 0, t_typical = 0, t_avg = 0, t_stdev = 0, p99 = 0, p999 = 0;
};

inline constexpr std::size_t kLatencyMeasureTail = 2;

[[nodiscard]] inline LatencyStats compute_latency_stats(std::vector<double> round_trips_usec,
                                                        double rtt_factor = 2) {
    LatencyStats stats;
    if (round_trips_usec.empty()) { return stats; }
    std::sort(round_trips_usec.begin(), round_trips_usec.end());
    const std::size_t count = round_trips_usec.size();
    const std::size_t m = count > kLatencyMeasureTail ? count - kLatencyMeasureTail : count;
    const auto at = [&](std::size_t index) {
        return round_trips_usec[std::min(index, count - 1)] / rtt_factor;
    };
    stats.samples = m;
    stats.t_min = at(0);
    stats.t_max = at(m);
    stats.t_typical = m % 2 == 0 ? (at(m / 2) + at(m / 2 - 1)) / 2 : at(m / 2);
    double sum = 0;
    for (std::size_t i = 0; i < m; ++i) { sum += at(i); }
    stats.t_avg = sum / static_cast<double>(m);
    double squares = 0;
    for (std::size_t i = 0; i < m; ++i) {
        squares += (at(i) - stats.t_avg) * (at(i) - stats.t_avg);
    }
    stats.t_stdev = std::sqrt(squares / static_cast<double>(m));
    stats.p99 = at(static_cast<std::size_t>(std::ceil(static_cast<double>(m) * 0.99)));
    stats.p999 = at(static_cast<std::size_t>(std::ceil(static_cast<double>(m) * 0.999)));
    return stats;
}

inline constexpr char kResultLine[] =
    "---------------------------------------------------------------------------------------\n";

// The table ib_send_lat prints, with its header and row formats.
[[nodiscard]] inline std::string latency_table(std::size_t size, long long iters,
                                               const LatencyStats& stats) {
    char row[256];
    std::snprintf(row, sizeof row,
                  " %-7zu %lld          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     "
                  "\t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
                  size, iters, stats.t_min, stats.t_max, stats.t_typical, stats.t_avg,
                  stats.t_stdev, stats.p99, stats.p999);
    return std::string(kResultLine) +
           " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
           "t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n" +
           row + kResultLine;
}
//! [stats]

}  // namespace tutorial
