// Step 12 unit tests: the UD QP's masks, the address vector, what the GRH area says, the options.
#define RDMA_TUTORIAL_UNIT_TEST
#include "../main.cpp"

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <vector>

namespace tutorial {
namespace {

TEST(Transitions, MasksAreWhatIbvModifyQpRequiresForUd) {
    EXPECT_EQ(ud_transition_mask(IBV_QPS_RESET, IBV_QPS_INIT),
              IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
    EXPECT_EQ(ud_transition_mask(IBV_QPS_INIT, IBV_QPS_RTR), IBV_QP_STATE);
    EXPECT_EQ(ud_transition_mask(IBV_QPS_RTR, IBV_QPS_RTS), IBV_QP_STATE | IBV_QP_SQ_PSN);
    EXPECT_EQ(ud_transition_mask(IBV_QPS_RESET, IBV_QPS_RTS), 0);
    EXPECT_EQ(attr_mask_text(kUdInitMask),
              "IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY");
    EXPECT_EQ(attr_mask_text(kUdRtsMask), "IBV_QP_STATE | IBV_QP_SQ_PSN");
}

TEST(Address, RoceAlwaysHasAGrhInfinibandOnlyWithAGid) {
    LocalPort port;
    port.attr.link_layer = IBV_LINK_LAYER_ETHERNET;
    port.gid_index = 3;
    port.service_level = 2;
    port.traffic_class = 0x68;
    const GidBytes gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
    const ibv_ah_attr roce = peer_address(port, 1, gid, 0);
    EXPECT_EQ(roce.is_global, 1);
    EXPECT_EQ(roce.grh.sgid_index, 3);
    EXPECT_EQ(roce.grh.traffic_class, 0x68);
    EXPECT_EQ(roce.sl, 2);
    EXPECT_EQ(std::memcmp(roce.grh.dgid.raw, gid.data(), 16), 0);
    port.attr.link_layer = IBV_LINK_LAYER_INFINIBAND;
    const ibv_ah_attr ib = peer_address(port, 2, GidBytes{}, 9);
    EXPECT_EQ(ib.is_global, 0);
    EXPECT_EQ(ib.dlid, 9);
    EXPECT_EQ(ib.port_num, 2);
}

// A receive buffer's first 40 bytes as rxe writes them for RoCE v2 over IPv4: 20 zero bytes,
// then the IPv4 header (TTL at 28, source at 32, destination at 36).
TEST(Grh, Ipv4HeaderAtOffset20) {
    std::array<std::byte, 40> grh{};
    grh[20] = std::byte{0x45};
    grh[28] = std::byte{64};
    const std::array<int, 8> addresses = {10, 0, 0, 2, 10, 0, 0, 1};
    for (std::size_t i = 0; i < addresses.size(); ++i) {
        grh[32 + i] = static_cast<std::byte>(addresses[i]);
    }
    ibv_wc wc{};
    wc.wc_flags = IBV_WC_GRH;
    EXPECT_EQ(grh_text(wc, grh.data()),
              "bytes 20-39 hold an IPv4 header: 10.0.0.2 -> 10.0.0.1, TTL 64");
    wc.wc_flags = 0;
    EXPECT_EQ(grh_text(wc, grh.data()), "no GRH: the 40 bytes are not defined");
}

TEST(Grh, Ipv6HeaderFillsAll40) {
    std::array<std::byte, 40> grh{};
    grh[0] = std::byte{0x60};
    grh[8] = std::byte{0xfe};
    grh[9] = std::byte{0x80};
    grh[23] = std::byte{2};
    grh[24] = std::byte{0xfe};
    grh[25] = std::byte{0x80};
    grh[39] = std::byte{1};
    ibv_wc wc{};
    wc.wc_flags = IBV_WC_GRH;
    EXPECT_EQ(grh_text(wc, grh.data()),
              "bytes 0-39 hold a GRH (an IPv6 header's layout): fe80::2 -> fe80::1");
}

// An IPv6 source GID whose byte 12 is 0x45 puts 0x45 at byte 20: still the IPv6 layout, as
// libibverbs reads it (its byte 0 says version 6, and bytes 20-39 are no IPv4 header).
TEST(Grh, AnIpv6SourceThatLooksLikeIpv4AtByte20IsStillIpv6) {
    std::array<std::byte, 40> grh{};
    grh[0] = std::byte{0x60};
    grh[20] = std::byte{0x45};
    EXPECT_FALSE(ipv4_at_20(grh.data()));
    grh[0] = std::byte{0};
    EXPECT_TRUE(ipv4_at_20(grh.data()));  // byte 0 is not 6: byte 20's version decides
}

// Bytes 0-19 are not defined before an IPv4 header: a 6 there does not hide a valid header.
TEST(Grh, AValidIpv4HeaderWinsOverByte0) {
    std::array<std::byte, 40> grh{};
    grh[0] = std::byte{0x60};
    const std::array<std::uint8_t, 20> header = {0x45, 0, 0,  0x54, 0, 0, 0x40, 0, 64, 17,
                                                 0,    0, 10, 0,    0, 2, 10,   0, 0,  1};
    std::uint32_t sum = 0;
    for (std::size_t i = 0; i < header.size(); i += 2) {
        sum += static_cast<std::uint32_t>(header[i] << 8 | header[i + 1]);
    }
    while (sum > 0xffff) { sum = (sum & 0xffff) + (sum >> 16); }
    const auto checksum = static_cast<std::uint16_t>(~sum);
    for (std::size_t i = 0; i < header.size(); ++i) { grh[20 + i] = std::byte{header[i]}; }
    grh[30] = static_cast<std::byte>(checksum >> 8);
    grh[31] = static_cast<std::byte>(checksum & 0xff);
    EXPECT_TRUE(ipv4_at_20(grh.data()));
    grh[31] ^= std::byte{1};  // a wrong checksum: the IPv6 layout, as libibverbs decides
    EXPECT_FALSE(ipv4_at_20(grh.data()));
}

Options parse(std::vector<std::string> words) {
    std::vector<char*> argv;
    static std::string program = "step12_ud";
    argv.push_back(program.data());
    for (std::string& word : words) { argv.push_back(word.data()); }
    return parse_options(static_cast<int>(argv.size()), argv.data());
}

TEST(Options, DefaultsMatchIbvUdPingpong) {
    const Options options = parse({});
    EXPECT_EQ(options.size, 1024u);
    EXPECT_EQ(options.qkey, 0x11111111u);
    EXPECT_EQ(options.rx_depth, 500);
    EXPECT_EQ(options.iters, 1000);
    EXPECT_EQ(options.tcp_port, 18515);
    EXPECT_TRUE(options.host.empty());
}

TEST(Options, ClientTakesHostAndQpnInDecimalOrHex) {
    EXPECT_EQ(parse({"10.0.0.1", "17"}).server_qpn, 17u);
    EXPECT_EQ(parse({"10.0.0.1", "0x11"}).server_qpn, 17u);
    EXPECT_EQ(parse({"--qkey", "0x7fffffff"}).qkey, 0x7fffffffu);
    EXPECT_EQ(parse({"--qkey", "5"}).qkey, 5u);
    EXPECT_EQ(parse({"--handshake", "10.0.0.1"}).host, "10.0.0.1");
}

TEST(Options, BadValuesAreUsageErrors) {
    EXPECT_THROW(parse({"10.0.0.1"}), UsageError);
    EXPECT_THROW(parse({"10.0.0.1", "0"}), UsageError);
    EXPECT_THROW(parse({"10.0.0.1", "0x1000000"}), UsageError);
    EXPECT_THROW(parse({"10.0.0.1", "0x"}), UsageError);
    EXPECT_THROW(parse({"10.0.0.1", "12a"}), UsageError);
    EXPECT_THROW(parse({"--qkey", "0x80000000"}), UsageError);
    EXPECT_THROW(parse({"--qkey", "-1"}), UsageError);
    EXPECT_THROW(parse({"--handshake", "10.0.0.1", "17"}), UsageError);
    EXPECT_THROW(parse({"--bind", "0.0.0.0"}), UsageError);
    EXPECT_NO_THROW(parse({"--handshake", "--bind", "0.0.0.0"}));
    EXPECT_THROW(parse({"--clients", "2", "10.0.0.1", "17"}), UsageError);
}

TEST(Compat, SizeCheckLeavesOutTheGrh) {
    ibv_wc wc{};
    wc.byte_len = 40 + 64;
    EXPECT_NO_THROW(check_size(wc, 64));
    wc.byte_len = 40 + 32;
    try {
        check_size(wc, 64);
        FAIL() << "no error";
    } catch (const TutorialError& e) {
        EXPECT_EQ(std::string(e.what()), "received a 32-byte message, but -s is 64");
        EXPECT_EQ(e.exit_code(), kExitPeer);
    }
}

}  // namespace
}  // namespace tutorial
