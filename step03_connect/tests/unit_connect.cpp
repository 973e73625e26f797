// Step 03 unit tests: the QP transition masks and attributes, options. (The handshake wire format,
// wire_format.hpp, is tested once for every step: ../../tests/unit_wire_format.cpp.)
#define RDMA_TUTORIAL_UNIT_TEST
#include "../main.cpp"

#include <gtest/gtest.h>

namespace tutorial {
namespace {

TEST(Transitions, MasksAreWhatIbvModifyQpRequiresForRc) {
    EXPECT_EQ(rc_transition_mask(IBV_QPS_RESET, IBV_QPS_INIT),
              IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    EXPECT_EQ(rc_transition_mask(IBV_QPS_INIT, IBV_QPS_RTR),
              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    EXPECT_EQ(rc_transition_mask(IBV_QPS_RTR, IBV_QPS_RTS),
              IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                  IBV_QP_MAX_QP_RD_ATOMIC);
    EXPECT_EQ(rc_transition_mask(IBV_QPS_RESET, IBV_QPS_RTS), 0);
    EXPECT_EQ(rc_transition_mask(IBV_QPS_INIT, IBV_QPS_RTS), 0);
}

TEST(Transitions, MaskTextNamesEveryBit) {
    EXPECT_EQ(attr_mask_text(kInitMask),
              "IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS");
    EXPECT_EQ(attr_mask_text(kRtsMask),
              "IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | "
              "IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC");
}

TEST(Transitions, RtrSetsTheGrhOnEthernetWhateverTheGid) {
    QpEndpointInfo remote;
    remote.qpn = 0x22;
    remote.psn = 0x123456;
    remote.gid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};  // interface id 0
    LocalPort port;
    port.attr.link_layer = IBV_LINK_LAYER_ETHERNET;
    port.gid_index = 1;
    port.service_level = 3;
    port.traffic_class = 0x6a;  // DSCP 26 (AF31), ECN 10 (ECT(0))
    const ibv_qp_attr roce = rtr_attributes(remote, IBV_MTU_1024, port, 1);
    EXPECT_EQ(roce.ah_attr.is_global, 1);
    EXPECT_EQ(roce.ah_attr.grh.sgid_index, 1);
    EXPECT_EQ(roce.ah_attr.grh.hop_limit, 1);
    EXPECT_EQ(roce.ah_attr.grh.traffic_class, 0x6a);
    EXPECT_EQ(roce.ah_attr.sl, 3);
    EXPECT_EQ(std::memcmp(roce.ah_attr.grh.dgid.raw, remote.gid.data(), 16), 0);
    EXPECT_EQ(roce.dest_qp_num, 0x22u);
    EXPECT_EQ(roce.rq_psn, 0x123456u);
    EXPECT_EQ(roce.path_mtu, IBV_MTU_1024);
    EXPECT_EQ(roce.ah_attr.port_num, 1);
    remote.lid = 7;
    remote.gid = {};  // InfiniBand inside a subnet: no GID, no GRH
    port.attr.link_layer = IBV_LINK_LAYER_INFINIBAND;
    port.gid_index = 0;
    const ibv_qp_attr ib = rtr_attributes(remote, IBV_MTU_2048, port, 2);
    EXPECT_EQ(ib.ah_attr.is_global, 0);
    EXPECT_EQ(ib.ah_attr.dlid, 7);
    EXPECT_EQ(ib.ah_attr.port_num, 2);
    EXPECT_EQ(ib.ah_attr.sl, 3);  // the virtual lane, which InfiniBand uses without a GRH
}

TEST(Transitions, InitTakesThePkeyIndex) {
    EXPECT_EQ(init_attributes(1, 0).pkey_index, 0);
    EXPECT_EQ(init_attributes(1, 3).pkey_index, 3);
}

// Two RoCE v2 IPv4 GIDs, as on a host with two addresses: the one the TCP connection uses wins.
TEST(GidByRoute, TheConnectionsLocalAddressChoosesTheGid) {
    const GidBytes first = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 2, 1};
    const GidBytes second = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 2, 11};
    const std::vector<GidEntry> table = {{0, {0xfe, 0x80}, IBV_GID_TYPE_ROCE_V2},
                                         {1, first, IBV_GID_TYPE_ROCE_V2},
                                         {2, first, IBV_GID_TYPE_ROCE_V1},
                                         {3, second, IBV_GID_TYPE_ROCE_V2}};
    std::string rule;
    EXPECT_EQ(choose_source_gid(table, -1, second, rule), 3u);
    EXPECT_EQ(rule, "the TCP connection's local address");
    EXPECT_EQ(choose_source_gid(table, -1, first, rule), 1u);
    const GidBytes loopback = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
    EXPECT_EQ(choose_source_gid(table, -1, loopback, rule), 1u);  // step 01's rule
    EXPECT_EQ(rule,
              "no RoCE v2 GID holds the TCP connection's local address ::ffff:127.0.0.1: "
              "step 01's rule");
    EXPECT_EQ(choose_source_gid(table, 2, second, rule), 2u);  // -g wins
    EXPECT_EQ(rule, "given with -g");
}

TEST(GidByRoute, APkeyIndexBeyondTheTableIsRefused) {
    ibv_port_attr attr{};
    attr.pkey_tbl_len = 1;
    EXPECT_NO_THROW(check_pkey_index(attr, 1, 0));
    try {
        check_pkey_index(attr, 1, 1);
        ADD_FAILURE() << "no error";
    } catch (const TutorialError& error) {
        EXPECT_EQ(error.exit_code(), kExitUsage);
        EXPECT_STREQ(error.what(),
                     "--pkey-index 1 is beyond port 1's P_Key table, whose pkey_tbl_len is 1");
    }
}

TEST(Transitions, RtsBoundsTheRetries) {
    const ibv_qp_attr attr = rts_attributes(0xabcdef);
    EXPECT_EQ(attr.qp_state, IBV_QPS_RTS);
    EXPECT_EQ(attr.sq_psn, 0xabcdefu);
    EXPECT_EQ(attr.timeout, 14);
    EXPECT_EQ(attr.retry_cnt, 6);  // not 7: rxe retries for ever then
    EXPECT_EQ(attr.max_rd_atomic, 1);
}

TEST(Transitions, PsnsAreRandom24BitValues) {
    std::uint32_t seen_or = 0;
    for (int i = 0; i < 64; ++i) {
        const std::uint32_t psn = random_psn();
        EXPECT_LE(psn, 0xffffffu);
        seen_or |= psn;
    }
    EXPECT_GT(seen_or, 0xffffu);
}

std::vector<char*> argv_of(std::vector<std::string>& args) {
    std::vector<char*> argv;
    for (std::string& arg : args) { argv.push_back(arg.data()); }
    argv.push_back(nullptr);
    return argv;
}

Options parse(std::vector<std::string> args) {
    args.insert(args.begin(), "step03_connect");
    std::vector<char*> argv = argv_of(args);
    return parse_options(static_cast<int>(args.size()), argv.data());
}

TEST(Options, DefaultsAreRcPingpongs) {
    const Options options = parse({});
    EXPECT_EQ(options.size, 4096u);
    EXPECT_EQ(options.tcp_port, 18515);
    EXPECT_EQ(options.timeout_seconds, 10);
    EXPECT_EQ(options.gid_index, -1);
    EXPECT_EQ(options.mtu, 0);
    EXPECT_TRUE(options.host.empty());
}

TEST(Options, HostMakesAClient) {
    const Options options = parse({"-p", "20000", "-g", "1", "-m", "1024", "127.0.0.1"});
    EXPECT_EQ(options.host, "127.0.0.1");
    EXPECT_EQ(options.tcp_port, 20000);
    EXPECT_EQ(options.gid_index, 1);
    EXPECT_EQ(options.mtu, 1024);
}

TEST(Options, RejectsBadValues) {
    EXPECT_THROW(parse({"-p", "0"}), UsageError);
    EXPECT_THROW(parse({"-p", "65536"}), UsageError);
    EXPECT_THROW(parse({"-m", "1000"}), UsageError);
    EXPECT_THROW(parse({"--timeout", "0"}), UsageError);
    EXPECT_THROW(parse({"--timeout", "5s"}), UsageError);
    EXPECT_THROW(parse({"a", "b"}), UsageError);
    EXPECT_THROW(parse({"--bind", "127.0.0.1", "host"}), UsageError);
    EXPECT_THROW(parse({"--nope"}), UsageError);
    EXPECT_THROW(parse({"-s", "63"}), UsageError);
}

}  // namespace
}  // namespace tutorial
