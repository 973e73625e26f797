// Step 06 unit tests: main.cpp's pure logic (options, rc_pingpong handshake format, payload,
// stats).
#include <gtest/gtest.h>

#define RDMA_TUTORIAL_UNIT_TEST
#include "../main.cpp"

namespace {

using namespace tutorial;

Options parse(std::vector<std::string> args) {
    args.insert(args.begin(), "step06_epoll");
    std::vector<char*> argv;
    for (auto& a : args) {
        argv.push_back(a.data());
    }
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
    EXPECT_THROW(parse({"--cq-depth", "2"}), UsageError);
    EXPECT_THROW(parse({"-e"}), UsageError) << "-e is a client option";
    EXPECT_THROW(parse({"--exit-after", "3", "host"}), UsageError);
    EXPECT_THROW(parse({"--bogus"}), UsageError);
    EXPECT_THROW(parse({"-s"}), UsageError);
    EXPECT_THROW(parse({"a", "b"}), UsageError);
}

TEST(Handshake, RoundTripInRcPingpongFormat) {
    QpInfo info;
    info.lid = 0x12;
    info.qpn = 0xabcdef;
    info.psn = 0x123456;
    info.gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
    const WireMessage msg = format_qp_info(info);
    EXPECT_STREQ(msg.data(), "0012:abcdef:123456:00000000000000000000ffff7f000001");
    const QpInfo back = parse_qp_info(msg);
    EXPECT_EQ(back.lid, info.lid);
    EXPECT_EQ(back.qpn, info.qpn);
    EXPECT_EQ(back.psn, info.psn);
    EXPECT_EQ(back.gid, info.gid);
}

TEST(Handshake, RejectsMalformedMessages) {
    const std::string good = "0012:abcdef:123456:00000000000000000000ffff7f000001";
    auto bytes = [](std::string s) { return std::vector<char>(s.begin(), s.end()); };
    auto with_nul = [&](std::string s) {
        auto v = bytes(s);
        v.push_back('\0');
        return v;
    };
    EXPECT_NO_THROW(parse_qp_info(with_nul(good)));
    const std::vector<std::vector<char>> bad = {
        bytes(good),                   // missing NUL
        with_nul(good.substr(0, 50)),  // short
        with_nul(good + "0"),          // long
        with_nul("GET / HTTP/1.1\r\nHost: x\r\n\r\n01234567890123456789012"),
        with_nul("0012-abcdef:123456:00000000000000000000ffff7f000001"),  // bad separator
        with_nul("0012:abcdeg:123456:00000000000000000000ffff7f000001"),  // non-hex QPN
        with_nul("0012:abcdef:12345z:00000000000000000000ffff7f000001"),  // non-hex PSN
        with_nul("0012:abcdef:123456:0000000000000000000 ffff7f000001"),  // bad GID
        with_nul("0012:000000:123456:00000000000000000000ffff7f000001"),  // QPN 0
        std::vector<char>(kWireSize, '\0'),
        {},
    };
    for (const auto& b : bad) {
        EXPECT_THROW(parse_qp_info(b), TutorialError) << printable(b);
        try {
            parse_qp_info(b);
        } catch (const TutorialError& e) {
            EXPECT_EQ(e.exit_code(), kExitPeer);
            EXPECT_NE(std::string(e.what()).find("bad handshake"), std::string::npos);
        }
    }
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

TEST(Stats, MedianPercentilesAndSpread) {
    std::vector<double> samples;
    for (int i = 1; i <= 1000; ++i) {
        samples.push_back(i);
    }
    const LatencyStats s = compute_stats(samples);
    EXPECT_DOUBLE_EQ(s.min, 1);
    EXPECT_DOUBLE_EQ(s.max, 1000);
    EXPECT_DOUBLE_EQ(s.typical, 501) << "samples[n/2] of the sorted samples";
    EXPECT_DOUBLE_EQ(s.average, 500.5);
    EXPECT_DOUBLE_EQ(s.p99, 990) << "nearest rank: ceil(0.99 * 1000) = 990th";
    EXPECT_DOUBLE_EQ(s.p999, 999);
    EXPECT_NEAR(s.stdev, 288.675, 0.001);
    EXPECT_DOUBLE_EQ(compute_stats({5}).p999, 5);
    EXPECT_DOUBLE_EQ(compute_stats({}).typical, 0);
}

TEST(GidChoice, PrefersRoceV2Ipv4Mapped) {
    std::vector<GidEntry> t(4);
    t[0] = {
        0, {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0xff, 0xfe, 0, 0, 0}, IBV_GID_TYPE_ROCE_V2};
    t[1] = {1, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1}, IBV_GID_TYPE_ROCE_V2};
    t[2] = {2, {}, IBV_GID_TYPE_ROCE_V2};
    t[3] = {3, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1}, IBV_GID_TYPE_ROCE_V1};
    EXPECT_EQ(choose_gid_index(t), 1);
    t.erase(t.begin() + 1);
    EXPECT_EQ(choose_gid_index(t), 0);
    EXPECT_EQ(choose_gid_index(std::span<const GidEntry>(t).subspan(1)), 3);
    EXPECT_EQ(choose_gid_index(std::span<const GidEntry>(t).subspan(1, 1)), std::nullopt);
}

}  // namespace
