// Step 01 unit tests: GID formatting and choice, enum texts and option parsing, without a device.
#define RDMA_TUTORIAL_UNIT_TEST
#include "../main.cpp"

#include <gtest/gtest.h>

#include <initializer_list>

namespace {

using namespace tutorial;

GidBytes gid_from_text(const char* text) {
    GidBytes gid{};
    EXPECT_EQ(inet_pton(AF_INET6, text, gid.data()), 1) << text;
    return gid;
}

GidEntry entry(std::uint32_t index, const char* text, ibv_gid_type type) {
    return GidEntry{index, gid_from_text(text), type};
}

Options parse(std::initializer_list<const char*> args) {
    std::vector<std::string> storage{"step01_devices"};
    storage.insert(storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& arg : storage) { argv.push_back(arg.data()); }
    argv.push_back(nullptr);
    return parse_options(static_cast<int>(storage.size()), argv.data());
}

std::string usage_error(std::initializer_list<const char*> args) {
    try {
        (void)parse(args);
    } catch (const UsageError& e) { return e.what(); }
    return "no UsageError";
}

TEST(GidFormat, Ipv4MappedShowsItsIpv4Address) {
    const GidBytes gid = gid_from_text("::ffff:127.0.0.1");
    EXPECT_TRUE(is_ipv4_mapped(gid));
    EXPECT_EQ(format_gid(gid), "::ffff:127.0.0.1");
    EXPECT_EQ(ipv4_of(gid), "127.0.0.1");
    EXPECT_EQ(ipv4_of(gid_from_text("::ffff:192.168.10.20")), "192.168.10.20");
}

TEST(GidFormat, Ipv6IsNotIpv4) {
    const GidBytes gid = gid_from_text("fe80::200:ff:fe00:0");
    EXPECT_FALSE(is_ipv4_mapped(gid));
    EXPECT_EQ(format_gid(gid), "fe80::200:ff:fe00:0");
    EXPECT_EQ(ipv4_of(gid), std::nullopt);
    EXPECT_FALSE(is_ipv4_mapped(gid_from_text("::1")));
    EXPECT_FALSE(is_ipv4_mapped(gid_from_text("::")));
}

TEST(GidFormat, ZeroGid) {
    EXPECT_TRUE(is_zero_gid(GidBytes{}));
    EXPECT_FALSE(is_zero_gid(gid_from_text("::1")));
}

TEST(GidChoice, LabTablePicksIpv4MappedRoceV2) {
    const std::vector<GidEntry> table = {entry(0, "fe80::200:ff:fe00:0", IBV_GID_TYPE_ROCE_V2),
                                         entry(1, "::ffff:127.0.0.1", IBV_GID_TYPE_ROCE_V2),
                                         entry(2, "::1", IBV_GID_TYPE_ROCE_V2)};
    const auto choice = choose_gid(table);
    ASSERT_TRUE(choice);
    EXPECT_EQ(choice->index, 1u);
    EXPECT_EQ(recommendation_line("rxe0", 1, choice),
              "recommended GID index for rxe0 port 1: 1 (::ffff:127.0.0.1, RoCE v2 with an "
              "IPv4-mapped address)");
}

TEST(GidChoice, Ipv4MappedRoceV2BeatsV1WithTheSameAddress) {
    // A real mlx5 port lists each address twice: RoCE v1 and RoCE v2.
    const std::vector<GidEntry> table = {entry(0, "fe80::1", IBV_GID_TYPE_ROCE_V1),
                                         entry(1, "fe80::1", IBV_GID_TYPE_ROCE_V2),
                                         entry(2, "::ffff:10.0.0.5", IBV_GID_TYPE_ROCE_V1),
                                         entry(3, "::ffff:10.0.0.5", IBV_GID_TYPE_ROCE_V2)};
    const auto choice = choose_gid(table);
    ASSERT_TRUE(choice);
    EXPECT_EQ(choice->index, 3u);
    EXPECT_EQ(choice->reason, "::ffff:10.0.0.5, RoCE v2 with an IPv4-mapped address");
}

TEST(GidChoice, RoceV2Ipv6Only) {
    const std::vector<GidEntry> table = {entry(0, "fe80::1", IBV_GID_TYPE_ROCE_V1),
                                         entry(1, "fe80::1", IBV_GID_TYPE_ROCE_V2),
                                         entry(2, "2001:db8::7", IBV_GID_TYPE_ROCE_V2)};
    const auto choice = choose_gid(table);
    ASSERT_TRUE(choice);
    EXPECT_EQ(choice->index, 1u);
    EXPECT_EQ(choice->reason,
              "fe80::1, RoCE v2 with an IPv6 address; no IPv4-mapped RoCE v2 entry");
}

// The chapter's exercise 2, answered: a link-local RoCE v2 GID beats an IPv4 RoCE v1 one.
TEST(GidChoice, LinkLocalRoceV2BeatsIpv4RoceV1) {
    const std::vector<GidEntry> table = {entry(0, "fe80::1", IBV_GID_TYPE_ROCE_V2),
                                         entry(1, "::ffff:10.0.0.5", IBV_GID_TYPE_ROCE_V1)};
    const auto choice = choose_gid(table);
    ASSERT_TRUE(choice);
    EXPECT_EQ(choice->index, 0u);
    EXPECT_EQ(choice->reason,
              "fe80::1, RoCE v2 with an IPv6 address; no IPv4-mapped RoCE v2 entry");
}

TEST(GidChoice, RoceV1Only) {
    const std::vector<GidEntry> table = {entry(4, "::ffff:10.0.0.5", IBV_GID_TYPE_ROCE_V1),
                                         entry(2, "fe80::1", IBV_GID_TYPE_ROCE_V1)};
    const auto choice = choose_gid(table);
    ASSERT_TRUE(choice);
    EXPECT_EQ(choice->index, 2u);  // equals: the lowest index wins
    EXPECT_EQ(choice->reason, "fe80::1, RoCE v1; no RoCE v2 entry");
}

TEST(GidChoice, InfiniBand) {
    const std::vector<GidEntry> table = {entry(0, "fe80::2:c903:f:4a1", IBV_GID_TYPE_IB)};
    const auto choice = choose_gid(table);
    ASSERT_TRUE(choice);
    EXPECT_EQ(choice->index, 0u);
    EXPECT_EQ(choice->reason,
              "fe80::2:c903:f:4a1, InfiniBand GID; inside a subnet the LID is enough");
}

TEST(GidChoice, EmptyAndZeroTablesHaveNoChoice) {
    EXPECT_EQ(choose_gid({}), std::nullopt);
    const std::vector<GidEntry> zeros = {GidEntry{0, GidBytes{}, IBV_GID_TYPE_ROCE_V2}};
    EXPECT_EQ(choose_gid(zeros), std::nullopt);
    EXPECT_EQ(recommendation_line("mlx5_0", 2, std::nullopt),
              "recommended GID index for mlx5_0 port 2: none (the GID table has no valid entry)");
}

TEST(EnumText, Names) {
    EXPECT_STREQ(port_state_text(IBV_PORT_ACTIVE), "PORT_ACTIVE");
    EXPECT_STREQ(port_state_text(IBV_PORT_DOWN), "PORT_DOWN");
    EXPECT_STREQ(phys_state_text(5), "LINK_UP");
    EXPECT_STREQ(phys_state_text(3), "DISABLED");
    EXPECT_STREQ(phys_state_text(99), "unknown");
    EXPECT_STREQ(link_layer_text(IBV_LINK_LAYER_ETHERNET), "Ethernet");
    EXPECT_STREQ(link_layer_text(IBV_LINK_LAYER_INFINIBAND), "InfiniBand");
    EXPECT_STREQ(link_layer_text(IBV_LINK_LAYER_UNSPECIFIED), "InfiniBand");
    EXPECT_EQ(mtu_bytes(IBV_MTU_1024), 1024);
    EXPECT_EQ(mtu_bytes(IBV_MTU_4096), 4096);
    EXPECT_EQ(mtu_bytes(static_cast<ibv_mtu>(9)), 0);
    EXPECT_STREQ(width_text(2), "4X");
    EXPECT_STREQ(speed_text(1), "2.5 Gbps");
    EXPECT_STREQ(speed_text(32), "25.0 Gbps");
    EXPECT_STREQ(transport_text(IBV_TRANSPORT_IB), "InfiniBand");
    EXPECT_STREQ(transport_text(IBV_TRANSPORT_IWARP), "iWARP");
    EXPECT_STREQ(atomic_cap_text(IBV_ATOMIC_HCA), "ATOMIC_HCA (atomic within this device)");
    EXPECT_STREQ(gid_type_text(IBV_GID_TYPE_ROCE_V2), "RoCE v2");
    EXPECT_STREQ(gid_type_text(IBV_GID_TYPE_ROCE_V1), "RoCE v1");
    EXPECT_STREQ(gid_type_text(IBV_GID_TYPE_IB), "IB");
}

TEST(EnumText, PortWarningNamesTheState) {
    EXPECT_EQ(
        port_warning("rxe0", 1, IBV_PORT_DOWN),
        "warning: rxe0 port 1 is PORT_DOWN, not PORT_ACTIVE: connections through it will fail");
}

TEST(Options, Defaults) {
    const Options options = parse({});
    EXPECT_EQ(options.device_name, "");
    EXPECT_EQ(options.ib_port, 0);
    EXPECT_FALSE(options.verbose);
    EXPECT_FALSE(options.help);
}

TEST(Options, ShortAndLong) {
    Options options = parse({"-d", "rxe0", "-i", "2", "-v"});
    EXPECT_EQ(options.device_name, "rxe0");
    EXPECT_EQ(options.ib_port, 2);
    EXPECT_TRUE(options.verbose);
    options = parse({"--ib-dev=mlx5_1", "--ib-port", "1", "--help"});
    EXPECT_EQ(options.device_name, "mlx5_1");
    EXPECT_EQ(options.ib_port, 1);
    EXPECT_TRUE(options.help);
}

TEST(Options, Errors) {
    EXPECT_EQ(usage_error({"-i", "0"}), "--ib-port must be a whole number from 1 to 255 (got '0')");
    EXPECT_EQ(usage_error({"-i", "1x"}),
              "--ib-port must be a whole number from 1 to 255 (got '1x')");
    EXPECT_EQ(usage_error({"-i", ""}), "--ib-port must be a whole number from 1 to 255 (got '')");
    EXPECT_EQ(usage_error({"--ib-port=256"}),
              "--ib-port must be a whole number from 1 to 255 (got '256')");
    EXPECT_EQ(usage_error({"-x"}), "unknown option '-x'");
    EXPECT_EQ(usage_error({"--frobnicate"}), "unknown option '--frobnicate'");
    EXPECT_EQ(usage_error({"-d"}), "option '-d' needs a value");
    EXPECT_EQ(usage_error({"extra"}), "unexpected argument 'extra'");
}

TEST(ParseNumber, WholeStringInRange) {
    EXPECT_EQ(parse_number("42", "--x", 1, 100), 42);
    EXPECT_THROW((void)parse_number("-1", "--x", 1, 100), UsageError);
    EXPECT_THROW((void)parse_number(" 4", "--x", 1, 100), UsageError);
    EXPECT_THROW((void)parse_number("99999999999999999999", "--x", 1, 100), UsageError);
}

}  // namespace
