// Step 05's one-sided modes: --op write (RDMA WRITE, then a write-with-immediate) and --op read.
#pragma once

#include "check.hpp"
#include "errors.hpp"
#include "options.hpp"
#include "pingpong.hpp"
#include "rdma_endpoint.hpp"
#include "stats.hpp"

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tutorial {

// check.hpp's pattern, checked where no peer message is involved: throws TutorialError (exit 1)
// naming the first byte that differs.
inline void verify_pattern(std::span<const std::byte> buffer, std::uint64_t seed,
                           const char* what) {
    if (const auto i = find_pattern_mismatch(buffer, seed)) {
        char text[160];
        std::snprintf(text, sizeof text, "%s: byte %zu is 0x%02x, expected 0x%02x", what, *i,
                      std::to_integer<unsigned>(buffer[*i]),
                      static_cast<unsigned>((seed + *i) % 251));  // fill_pattern's byte
        throw TutorialError(kExitRdma, text);
    }
}

// What the client of either mode prints after its loop: throughput, then the latency table of
// the post-to-completion times, whole: each is a round trip (the request out, the READ response
// or the WRITE's ACK back), and no one-way figure can be read from it.
inline void print_one_sided_figures(const char* verb, const char* label, const Options& options,
                                    std::chrono::duration<double> elapsed,
                                    std::vector<double> samples) {
    std::printf("%lld bytes in %.2f seconds = %.2f Mbit/sec\n",
                static_cast<long long>(options.size) * options.iters, elapsed.count(),
                static_cast<double>(options.size) * static_cast<double>(options.iters) * 8 /
                    (elapsed.count() * 1e6));
    std::printf("RDMA %s latency (%s):\n", verb, label);
    std::fputs(
        latency_table(options.size, options.iters, compute_latency_stats(std::move(samples), 1))
            .c_str(),
        stdout);
}

// The server of both modes waits this long for the client's last message: the whole run.
[[nodiscard]] inline std::chrono::milliseconds server_wait(const Options& options) {
    return std::chrono::seconds(options.timeout_seconds) +
           std::chrono::milliseconds(10) * options.iters;
}

//! [write]
// The client writes message i into the server's buffer, iters times, then a zero-length
// write-with-immediate carrying iters. The server sees one completion: that last one.
inline void run_write(RDMAEndpoint& endpoint, const Options& options) {
    if (options.host.empty()) {
        const ibv_wc wc = endpoint.poll_completion(kReceiveWrId, server_wait(options));
        if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc.wc_flags & IBV_WC_WITH_IMM)) {
            throw TutorialError(kExitPeer,
                                "expected a write-with-immediate, got completion opcode " +
                                    std::to_string(wc.opcode));
        }
        const std::uint32_t count = ntohl(wc.imm_data);
        verify_pattern(endpoint.buffer().first(options.size), count - 1, "the written buffer");
        std::printf(
            "server: %u RDMA WRITEs landed with no completion here; the "
            "write-with-immediate "
            "said so; %zu bytes verified\n",
            count, options.size);
        return;
    }
    std::vector<double> samples;
    const auto start = Clock::now();
    for (long long i = 0; i < options.iters; ++i) {
        fill_pattern(endpoint.buffer().first(options.size), static_cast<std::uint64_t>(i));
        const auto posted = Clock::now();
        endpoint.post_write(static_cast<std::uint64_t>(i), 0, 0, options.size);
        (void)endpoint.poll_completion(static_cast<std::uint64_t>(i),
                                       std::chrono::seconds(options.timeout_seconds));
        samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - posted).count());
    }
    const std::chrono::duration<double> elapsed = Clock::now() - start;
    endpoint.post_write_with_imm(kSendWrId, 0, 0, 0, static_cast<std::uint32_t>(options.iters));
    (void)endpoint.poll_completion(kSendWrId, std::chrono::seconds(options.timeout_seconds));
    std::printf(
        "client: %lld RDMA WRITEs of %zu bytes, then a "
        "write-with-immediate (%lld)\n",
        options.iters, options.size, options.iters);
    print_one_sided_figures("WRITE",
                            "post to completion, the WRITE out and its ACK back; ib_write_lat "
                            "times a WRITE ping-pong instead",
                            options, elapsed, std::move(samples));
}
//! [write]

//! [read]
// The server fills its buffer and waits for the client's final send; the client reads the buffer
// iters times, verifies it, and sends that zero-length message.
inline constexpr std::uint64_t kReadSeed = 0x5eed;

inline void run_read(RDMAEndpoint& endpoint, const Options& options) {
    if (options.host.empty()) {
        (void)endpoint.poll_completion(kReceiveWrId, server_wait(options));
        std::printf(
            "server: the client read %zu bytes %lld times with no "
            "completion here; its "
            "final send said so\n",
            options.size, options.iters);
        return;
    }
    std::vector<double> samples;
    const auto start = Clock::now();
    for (long long i = 0; i < options.iters; ++i) {
        const auto posted = Clock::now();
        endpoint.post_read(static_cast<std::uint64_t>(i), 0, 0, options.size);
        (void)endpoint.poll_completion(static_cast<std::uint64_t>(i),
                                       std::chrono::seconds(options.timeout_seconds));
        samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - posted).count());
    }
    const std::chrono::duration<double> elapsed = Clock::now() - start;
    verify_pattern(endpoint.buffer().first(options.size), kReadSeed,
                   "the buffer read from the server");
    endpoint.post_send(kSendWrId, 0, 0);
    (void)endpoint.poll_completion(kSendWrId, std::chrono::seconds(options.timeout_seconds));
    std::printf("client: %lld RDMA READs of %zu bytes; the last one verified\n", options.iters,
                options.size);
    print_one_sided_figures("READ", "post to completion, as ib_read_lat reports it", options,
                            elapsed, std::move(samples));
}
//! [read]

}  // namespace tutorial
