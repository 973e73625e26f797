// Step 06 unit tests: the program's pure logic (options, the handshake formats, payload).
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "options.hpp"
#include "pingpong.hpp"
#include "server.hpp"
#include "wire_format.hpp"

namespace {

using namespace tutorial;

Options parse(std::vector<std::string> args) {
    args.insert(args.begin(), "step10_srq");
    std::vector<char*> argv;
    for (auto& a : args) { argv.push_back(a.data()); }
    argv.push_back(nullptr);
    return parse_options(static_cast<int>(args.size()), argv.data());
}

TEST(Options, DefaultsFollowRcPingpong) {
    const Options o = parse({});
    EXPECT_TRUE(o.host.empty());
    EXPECT_EQ(o.size, 4096u);
    EXPECT_EQ(o.iters, 1000u);
    EXPECT_EQ(o.rx_depth, 500u);
    EXPECT_EQ(o.mtu, 1024);
    EXPECT_EQ(o.tcp_port, 18515);
    EXPECT_EQ(o.mode, WaitMode::busy);
    EXPECT_EQ(o.safety_ms, 100);
}

TEST(Options, SharedResources) {
    const Options o = parse({"--srq-depth", "64", "--srq-limit", "16", "--max-clients", "8"});
    EXPECT_EQ(o.rx_depth, 64);
    EXPECT_EQ(o.srq_limit, 16u);
    EXPECT_EQ(o.max_clients, 8u);
    EXPECT_EQ(parse({"--connections", "10", "host"}).connections, 10u);
    EXPECT_THROW(parse({"--connections", "10"}), UsageError) << "a client option";
    EXPECT_THROW(parse({"-r", "16", "--srq-limit", "16"}), UsageError) << "not below the depth";
}

TEST(Options, ClientModes) {
    EXPECT_EQ(parse({"-e", "host"}).mode, WaitMode::event);
    EXPECT_EQ(parse({"--spin-us", "50", "host"}).mode, WaitMode::spin);
    EXPECT_EQ(parse({"--spin-us", "0", "-e", "host"}).mode, WaitMode::event);
    EXPECT_EQ(parse({"--rate", "1000", "host"}).rate, 1000u);
}

TEST(Options, RejectsBadValuesAndMisplacedOptions) {
    EXPECT_THROW(parse({"-n", "12x"}), UsageError);
    EXPECT_THROW(parse({"-n", "0"}), UsageError);
    EXPECT_THROW(parse({"-m", "1000"}), UsageError);
    EXPECT_THROW(parse({"-p", "65536"}), UsageError);
    EXPECT_THROW(parse({"-e"}), UsageError) << "-e is a client option";
    EXPECT_THROW(parse({"--exit-after", "3", "host"}), UsageError);
    EXPECT_THROW(parse({"--bogus"}), UsageError);
    EXPECT_THROW(parse({"-s"}), UsageError);
    EXPECT_THROW(parse({"a", "b"}), UsageError);
}

std::string usage_error(std::vector<std::string> args) {
    try {
        (void)parse(std::move(args));
    } catch (const UsageError& e) { return e.what(); }
    return "no UsageError";
}

TEST(Options, SpinIsAClientMode) {
    EXPECT_EQ(usage_error({"--spin-us", "50"}),
              "-e, --spin-us and --rate are client options (give a HOST)");
    EXPECT_TRUE(parse({"--spin-us", "0"}).host.empty()) << "0: no spin";
    EXPECT_THROW(parse({"--rate", "10"}), UsageError) << "--rate is a client option";
}

TEST(Options, UnknownOptionsAreQuotedAsStepsOneToFourDo) {
    EXPECT_EQ(usage_error({"-x"}), "unknown option '-x'");
    EXPECT_EQ(usage_error({"-ex", "host"}), "unknown option '-x'") << "the option, not the cluster";
    EXPECT_EQ(usage_error({"--bogus"}), "unknown option '--bogus'");
    EXPECT_EQ(usage_error({"--cq-depth", "600"}), "unknown option '--cq-depth'")
        << "the CQ is always rx + tx";
    EXPECT_EQ(usage_error({"--check=1"}), "option '--check' takes no value");
    EXPECT_EQ(usage_error({"-s"}), "option '-s' needs a value");
}

TEST(Handshake, ServerTellsTheFormatFromTheFirstFourBytes) {
    PeerInfo info;
    info.qpn = 0x11;
    info.length = 8192;
    const HandshakeV3Message v3 = encode_handshake_v3(info);
    std::array<char, 4> first{};
    std::memcpy(first.data(), v3.data(), 4);
    EXPECT_EQ(detect_handshake(first), HandshakeFormat::v3);
    const WireMessage rc = format_wire_message(info);  // "0000:000011:..."
    std::memcpy(first.data(), rc.data(), 4);
    EXPECT_EQ(detect_handshake(first), HandshakeFormat::rc_pingpong);
    std::memcpy(first.data(), "GET ", 4);  // then rejected by parse_wire_message
    EXPECT_EQ(detect_handshake(first), HandshakeFormat::rc_pingpong);
}

TEST(Handshake, ClientSendsSizeAndIterationsInV3) {
    const Options o = parse({"-s", "64", "-n", "2000", "127.0.0.1"});
    PeerInfo local;
    local.qpn = 0x11;
    local.length = o.size;  // a connection's send slot
    const PeerInfo info = with_run(local, handshake_settings(o));
    EXPECT_EQ(info.message_size, 64u);
    EXPECT_EQ(info.iterations, 2000u);
    EXPECT_EQ(info.qpn, 0x11u);
    const HandshakeV3Message m = encode_handshake_v3(info);
    EXPECT_EQ(std::to_integer<int>(m[5]), 3);  // the version
    const PeerInfo back = decode_handshake_v3(m);
    EXPECT_EQ(back.message_size, 64u);
    EXPECT_EQ(back.iterations, 2000u);
    PeerInfo server = back;
    server.iterations = 1000;
    EXPECT_EQ(describe_run_mismatch(server, back, true),
              "the client uses -n 2000, this server -n 1000: both sides must use the same -n");
    EXPECT_EQ(describe_run_mismatch(back, server, false),
              "the server uses -n 1000, this client -n 2000: both sides must use the same -n");
}

TEST(Payload, PatternDependsOnIterationAndSide) {
    std::vector<std::byte> m(64);
    fill_payload(m, 7, kClientSide);
    EXPECT_TRUE(payload_ok(m, 7, kClientSide));
    EXPECT_FALSE(payload_ok(m, 8, kClientSide));
    EXPECT_FALSE(payload_ok(m, 7, kServerSide));
    m[40] ^= std::byte{1};
    EXPECT_FALSE(payload_ok(m, 7, kClientSide));
    std::vector<std::byte> one(1);
    fill_payload(one, 300, kServerSide);
    EXPECT_TRUE(payload_ok(one, 300, kServerSide));
}

// A failed completion's opcode is undefined (ibv_poll_cq(3)): the caller names the side from the
// wr_id, and the hint follows it, whatever the opcode field holds.
TEST(WorkCompletionError, TheHintFollowsTheSideTheCallerNames) {
    ibv_wc wc{};
    wc.status = IBV_WC_LOC_QP_OP_ERR;
    wc.opcode = IBV_WC_SEND;
    const tutorial::WorkCompletionError receive(wc, true);
    const tutorial::WorkCompletionError send(wc, false);
    EXPECT_EQ(receive.hint().rfind("the incoming message did not fit the posted receive", 0), 0u)
        << receive.hint();
    EXPECT_EQ(send.hint().rfind("the send request was invalid for this QP", 0), 0u) << send.hint();
}

}  // namespace
