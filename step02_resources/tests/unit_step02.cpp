// Step 02 unit tests: option parsing, device-limit checks and the GID choice, without a device.
#define RDMA_TUTORIAL_UNIT_TEST
#include "../main.cpp"

#include <gtest/gtest.h>

#include <initializer_list>

namespace {

using namespace tutorial;

Options parse(std::initializer_list<const char*> args) {
    std::vector<std::string> storage{"step02_resources"};
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

ibv_device_attr lab_limits() {
    ibv_device_attr attr{};
    attr.max_mr_size = 1ULL << 32;
    attr.max_qp_wr = 16384;
    attr.max_cqe = 32767;
    return attr;
}

std::string limit_error(const Options& options) {
    try {
        check_limits(options, lab_limits());
    } catch (const TutorialError& e) {
        EXPECT_EQ(e.exit_code(), kExitUsage);
        return e.what();
    }
    return "no TutorialError";
}

TEST(Options, Defaults) {
    const Options options = parse({});
    EXPECT_EQ(options.device_name, "");
    EXPECT_EQ(options.ib_port, 1);
    EXPECT_EQ(options.size, 4096u);
    EXPECT_EQ(options.rx_depth, 500);
    EXPECT_EQ(options.tx_depth, 16);
    EXPECT_FALSE(options.help);
}

TEST(Options, ShortAndLong) {
    Options options = parse({"-d", "rxe0", "-i", "2", "-s", "65536", "-r", "100", "-t", "8"});
    EXPECT_EQ(options.device_name, "rxe0");
    EXPECT_EQ(options.ib_port, 2);
    EXPECT_EQ(options.size, 65536u);
    EXPECT_EQ(options.rx_depth, 100);
    EXPECT_EQ(options.tx_depth, 8);
    options = parse({"--size=1073741824", "--rx-depth", "1", "--tx-depth=1", "--help"});
    EXPECT_EQ(options.size, 1073741824u);
    EXPECT_EQ(options.rx_depth, 1);
    EXPECT_EQ(options.tx_depth, 1);
    EXPECT_TRUE(options.help);
}

TEST(Options, Errors) {
    EXPECT_EQ(usage_error({"-s", "0"}),
              "--size must be a whole number from 1 to 1073741824 (got '0')");
    EXPECT_EQ(usage_error({"-s", "1073741825"}),
              "--size must be a whole number from 1 to 1073741824 (got '1073741825')");
    EXPECT_EQ(usage_error({"-s", "4k"}),
              "--size must be a whole number from 1 to 1073741824 (got '4k')");
    EXPECT_EQ(usage_error({"-r", "0"}),
              "--rx-depth must be a whole number from 1 to 16777216 (got '0')");
    EXPECT_EQ(usage_error({"-t", "-5"}),
              "--tx-depth must be a whole number from 1 to 16777216 (got '-5')");
    EXPECT_EQ(usage_error({"-i", "0"}), "--ib-port must be a whole number from 1 to 255 (got '0')");
    EXPECT_EQ(usage_error({"-v"}), "unknown option '-v'");
    EXPECT_EQ(usage_error({"--frobnicate"}), "unknown option '--frobnicate'");
    EXPECT_EQ(usage_error({"--size"}), "option '--size' needs a value");
    EXPECT_EQ(usage_error({"extra"}), "unexpected argument 'extra'");
}

TEST(Limits, WithinLimitsPasses) {
    Options options;
    EXPECT_NO_THROW(check_limits(options, lab_limits()));
    options.rx_depth = 16384;
    options.tx_depth = 16383;  // 32767 CQ entries: exactly max_cqe
    EXPECT_NO_THROW(check_limits(options, lab_limits()));
}

TEST(Limits, EachOverLimitNamesTheLimit) {
    Options options;
    options.size = (1ULL << 32) + 1;
    EXPECT_EQ(limit_error(options),
              "--size 4294967297 is over the device limit max_mr_size = 4294967296");
    options = Options{};
    options.rx_depth = 16385;
    EXPECT_EQ(limit_error(options), "--rx-depth 16385 is over the device limit max_qp_wr = 16384");
    options = Options{};
    options.tx_depth = 20000;
    EXPECT_EQ(limit_error(options), "--tx-depth 20000 is over the device limit max_qp_wr = 16384");
    options = Options{};
    options.rx_depth = 16384;
    options.tx_depth = 16384;
    EXPECT_EQ(limit_error(options),
              "--rx-depth 16384 + --tx-depth 16384 = 32768 CQ entries is over the device limit "
              "max_cqe = 32767");
}

TEST(Memlock, ReportsSizeAndLimit) {
    try {
        throw_reg_mr_error(ENOMEM, 1048576);
    } catch (const TutorialError& e) {
        EXPECT_EQ(e.exit_code(), kExitRdma);
        EXPECT_STREQ(e.what(), "ibv_reg_mr: Cannot allocate memory (registering 1048576 bytes)");
        EXPECT_EQ(e.hint(), "the memlock limit (ulimit -l, now " + memlock_limit_text() +
                                ") is too low to pin 1048576 bytes: raise it with ulimit -l "
                                "unlimited or in /etc/security/limits.conf");
    }
    try {
        throw_reg_mr_error(EINVAL, 10);
    } catch (const TutorialError& e) {
        EXPECT_STREQ(e.what(), "ibv_reg_mr: Invalid argument (registering 10 bytes)");
        EXPECT_EQ(e.hint(), "");
    }
}

TEST(EnumText, Names) {
    EXPECT_STREQ(qp_state_text(IBV_QPS_INIT), "INIT");
    EXPECT_STREQ(qp_state_text(IBV_QPS_RTS), "RTS");
    EXPECT_STREQ(port_state_text(IBV_PORT_ACTIVE), "PORT_ACTIVE");
    EXPECT_STREQ(link_layer_text(IBV_LINK_LAYER_ETHERNET), "Ethernet");
}

TEST(GidChoice, LabTable) {
    GidBytes link_local{}, mapped{}, loopback{};
    ASSERT_EQ(inet_pton(AF_INET6, "fe80::200:ff:fe00:0", link_local.data()), 1);
    ASSERT_EQ(inet_pton(AF_INET6, "::ffff:127.0.0.1", mapped.data()), 1);
    ASSERT_EQ(inet_pton(AF_INET6, "::1", loopback.data()), 1);
    const std::vector<GidEntry> table = {{0, link_local, IBV_GID_TYPE_ROCE_V2},
                                         {1, mapped, IBV_GID_TYPE_ROCE_V2},
                                         {2, loopback, IBV_GID_TYPE_ROCE_V2}};
    EXPECT_EQ(recommendation_line("rxe0", 1, choose_gid(table)),
              "recommended GID index for rxe0 port 1: 1 (::ffff:127.0.0.1, RoCE v2 with an "
              "IPv4-mapped address)");
    EXPECT_EQ(choose_gid({}), std::nullopt);
}

}  // namespace
