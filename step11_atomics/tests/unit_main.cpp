// Step 11 unit tests: the program's pure logic (options, the target's layout, the window reply,
// the atomics' refusals), no device.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "atomics.hpp"
#include "options.hpp"
#include "target.hpp"

namespace {

using namespace tutorial;

Options parse(std::vector<std::string> args) {
    args.insert(args.begin(), "step11_atomics");
    std::vector<char*> argv;
    for (auto& a : args) { argv.push_back(a.data()); }
    argv.push_back(nullptr);
    return parse_options(static_cast<int>(args.size()), argv.data());
}

TEST(Options, Defaults) {
    const Options o = parse({});
    EXPECT_TRUE(o.host.empty());
    EXPECT_EQ(o.op, Op::fetch_add);
    EXPECT_EQ(o.iters, 1000u);
    EXPECT_EQ(o.connections, 1u);
    EXPECT_EQ(o.window, 1u);
    EXPECT_EQ(o.readers, 0u);
    EXPECT_EQ(o.offset, 0u);
    EXPECT_EQ(o.max_clients, 16u);
}

TEST(Options, EveryOp) {
    EXPECT_EQ(parse({"--op", "read-write", "h"}).op, Op::read_write);
    EXPECT_EQ(parse({"--op", "fetch-add", "h"}).op, Op::fetch_add);
    EXPECT_EQ(parse({"--op", "cas", "h"}).op, Op::cas);
    EXPECT_EQ(parse({"--op", "window", "h"}).op, Op::window);
}

TEST(Options, Refusals) {
    const auto refused = [](std::vector<std::string> args, const std::string& message) {
        try {
            (void)parse(std::move(args));
            ADD_FAILURE() << "accepted; expected: " << message;
        } catch (const UsageError& e) { EXPECT_EQ(std::string(e.what()), message); }
    };
    refused({"--op", "swap", "h"},
            "--op must be read-write, fetch-add, cas or window (got 'swap')");
    refused({"--op", "cas"},
            "--op, --connections, --window, --readers and --offset are client options (give a "
            "HOST)");
    refused({"--exit-after", "1", "h"},
            "--exit-after and --bind are server options (drop the HOST)");
    refused({"--op", "cas", "--window", "4", "h"}, "--window goes with --op fetch-add");
    refused({"--op", "window", "--connections", "2", "h"},
            "--op window uses one connection: drop --connections");
    refused({"--op", "cas", "--connections", "2", "--readers", "2", "h"},
            "--readers goes with --op cas, and must leave a writer: below --connections");
    refused({"--op", "fetch-add", "--readers", "1", "--connections", "2", "h"},
            "--readers goes with --op cas, and must leave a writer: below --connections");
}

TEST(Target, LayoutIsAligned) {
    for (const std::uint64_t offset :
         {kCounterOffset, kLockOffset, kVersionOffset, kRecordOffset}) {
        EXPECT_EQ(offset % 8, 0u) << offset;
    }
    EXPECT_LE(kRecordOffset + kRecordBytes, kPage);
    EXPECT_EQ(slot_offset(0), kPage);
    EXPECT_EQ(target_bytes(16), 17 * kPage);
    EXPECT_EQ(slot_offset(15) + kPage, target_bytes(16));
}

TEST(Target, WindowReplyRoundTrip) {
    const WindowGrant sent{0x00007f12345678c0ULL, kWindowBytes, 0x080001feU};
    const auto bytes = encode_window_reply(sent);
    EXPECT_EQ(std::string(bytes.data(), 4), "WNDW");
    EXPECT_EQ(static_cast<unsigned char>(bytes[20]), 0x08);  // big-endian: the rkey's top byte
    const WindowGrant got = decode_window_reply(bytes);
    EXPECT_EQ(got.addr, sent.addr);
    EXPECT_EQ(got.length, sent.length);
    EXPECT_EQ(got.rkey, sent.rkey);
}

TEST(Atomics, AtomicCapNoneIsRefused) {
    EXPECT_EQ(atomic_cap_refusal("mlx5_0", IBV_ATOMIC_NONE),
              "mlx5_0 reports atomic_cap IBV_ATOMIC_NONE: it runs no FETCH_AND_ADD or "
              "COMPARE_AND_SWAP; use a device that reports IBV_ATOMIC_HCA or GLOB (Soft-RoCE "
              "reports HCA)");
    EXPECT_EQ(atomic_cap_refusal("rxe0", IBV_ATOMIC_HCA), "");
    EXPECT_EQ(atomic_cap_refusal("mlx5_0", IBV_ATOMIC_GLOB), "");
}

TEST(Atomics, UnalignedIsRefusedBeforePosting) {
    EXPECT_NO_THROW(require_aligned(0x1000));
    EXPECT_NO_THROW(require_aligned(8));
    for (const std::uint64_t addr : {1ULL, 4ULL, 0x1004ULL, 0x7ULL}) {
        EXPECT_THROW(require_aligned(addr), std::invalid_argument) << addr;
    }
}

}  // namespace
