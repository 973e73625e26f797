// Step 04 unit tests: QP masks, the latency figures, the --check pattern and negotiation, options.
// (The wire format, wire_format.hpp, is tested once for every step:
// ../../tests/unit_wire_format.cpp.)
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
    args.insert(args.begin(), "step04_pingpong");
    std::vector<char*> argv = argv_of(args);
    return parse_options(static_cast<int>(args.size()), argv.data());
}

TEST(Options, DefaultsAreRcPingpongs) {
    const Options options = parse({});
    EXPECT_EQ(options.size, 4096u);
    EXPECT_EQ(options.iters, 1000);
    EXPECT_EQ(options.rx_depth, 500);
    EXPECT_EQ(options.warmup, 0);
    EXPECT_FALSE(options.check);
    EXPECT_FALSE(options.plain);
    EXPECT_TRUE(options.latency_file.empty());
    EXPECT_EQ(options.tcp_port, 18515);
    EXPECT_EQ(options.timeout_seconds, 10);
    EXPECT_EQ(options.gid_index, -1);
    EXPECT_EQ(options.mtu, 1024);
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
    EXPECT_THROW(parse({"-s", "0"}), UsageError);
    EXPECT_THROW(parse({"-n", "0"}), UsageError);
    EXPECT_THROW(parse({"--warmup", "-1"}), UsageError);
    EXPECT_THROW(parse({"--latency-file="}), UsageError);
    EXPECT_THROW(parse({"--latency-file"}), UsageError);
}

TEST(Options, RcPingpongOptionsAndOurs) {
    const Options options =
        parse({"-s", "1",    "-n", "20000", "-r", "100",   "-m",       "2048", "-g",      "1",
               "-d", "rxe0", "-i", "1",     "-p", "19999", "--warmup", "100",  "--check", "host"});
    EXPECT_EQ(options.size, 1u);
    EXPECT_EQ(options.iters, 20000);
    EXPECT_EQ(options.rx_depth, 100);
    EXPECT_EQ(options.mtu, 2048);
    EXPECT_EQ(options.device_name, "rxe0");
    EXPECT_EQ(options.warmup, 100);
    EXPECT_TRUE(options.check);
    EXPECT_EQ(options.host, "host");
    EXPECT_TRUE(parse({"--plain"}).plain);
}

// Round trips 2, 4, ..., 20 usec: halved 1..10. The 2 largest leave the count (m = 8).
TEST(LatencyStats, FollowsPerftestOnKnownSamples) {
    std::vector<double> round_trips;
    for (int i = 10; i >= 1; --i) { round_trips.push_back(2.0 * i); }
    const LatencyStats stats = compute_latency_stats(round_trips);
    EXPECT_EQ(stats.samples, 8u);
    EXPECT_DOUBLE_EQ(stats.t_min, 1.0);
    EXPECT_DOUBLE_EQ(stats.t_max, 9.0);      // sample[m], not sample[m - 1]
    EXPECT_DOUBLE_EQ(stats.t_typical, 4.5);  // m even: mean of samples m/2 - 1 and m/2
    EXPECT_DOUBLE_EQ(stats.t_avg, 4.5);
    EXPECT_NEAR(stats.t_stdev, std::sqrt(5.25), 1e-12);
    EXPECT_DOUBLE_EQ(stats.p99, 9.0);  // sample[ceil(8 * 0.99)] = sample[8]
    EXPECT_DOUBLE_EQ(stats.p999, 9.0);
}

TEST(LatencyStats, IndexesPercentilesLikePerftest) {
    std::vector<double> round_trips;
    for (int i = 1000; i >= 1; --i) {
        round_trips.push_back(i);  // halved: 0.5 .. 500
    }
    const LatencyStats stats = compute_latency_stats(round_trips);
    EXPECT_EQ(stats.samples, 998u);
    EXPECT_DOUBLE_EQ(stats.t_typical, (500.0 + 499.0) / 4);  // (s[499] + s[498]) / 2, halved
    EXPECT_DOUBLE_EQ(stats.p99, 990.0 / 2);                  // s[ceil(998 * 0.99)] = s[989] = 990
    EXPECT_DOUBLE_EQ(stats.p999, 999.0 / 2);                 // s[ceil(998 * 0.999)] = s[998] = 999
    EXPECT_DOUBLE_EQ(stats.t_max, 999.0 / 2);  // s[998]: the largest sample is left out
}

// ib_send_lat -n 6 -U in the lab (perftest 4.5-0.17) printed its 5 halved samples unsorted,
// 81171.9 27249.2 44893 26107.1 29460.9, then t_min 26107.05, t_max 44892.99, t_typical
// 27249.23, t_avg 27605.71, 99% and 99.9% 44892.99. Same samples, same figures here.
TEST(LatencyStats, MatchesTheInstalledIbSendLat) {
    const LatencyStats stats =
        compute_latency_stats({2 * 81171.9, 2 * 27249.2, 2 * 44893, 2 * 26107.1, 2 * 29460.9});
    EXPECT_EQ(stats.samples, 3u);
    EXPECT_NEAR(stats.t_min, 26107.1, 1e-6);
    EXPECT_NEAR(stats.t_max, 44893, 1e-6);  // not 81171.9: the largest never shows
    EXPECT_NEAR(stats.t_typical, 27249.2, 1e-6);
    EXPECT_NEAR(stats.t_avg, 27605.73, 0.01);
    EXPECT_NEAR(stats.p99, 44893, 1e-6);
    EXPECT_NEAR(stats.p999, 44893, 1e-6);
    EXPECT_NEAR(stats.t_stdev, 1392.2, 0.1);  // perftest: 1391.85, from truncated deviations
}

TEST(LatencyStats, OddCountTakesTheMiddleSample) {
    const LatencyStats stats = compute_latency_stats({10, 2, 6, 4, 8, 100, 200});  // m = 5
    EXPECT_EQ(stats.samples, 5u);
    EXPECT_DOUBLE_EQ(stats.t_typical, 3.0);  // sorted 2 4 6 8 10 | 100 200: s[2] / 2
    EXPECT_DOUBLE_EQ(stats.t_avg, 3.0);
}

TEST(LatencyStats, FewSamplesStayInBounds) {
    EXPECT_EQ(compute_latency_stats({}).samples, 0u);
    const LatencyStats one = compute_latency_stats({4});
    EXPECT_DOUBLE_EQ(one.t_min, 2.0);
    EXPECT_DOUBLE_EQ(one.p999, 2.0);
    const LatencyStats two = compute_latency_stats({4, 8});
    EXPECT_DOUBLE_EQ(two.t_max, 4.0);
}

TEST(Summary, PrintsIbvRcPingpongsTwoLines) {
    EXPECT_EQ(rc_pingpong_summary(4096, 1000, 250000.0),
              "8192000 bytes in 0.25 seconds = 262.14 Mbit/sec\n"
              "1000 iters in 0.25 seconds = 250.00 usec/iter\n");
}

TEST(Summary, TableHasIbSendLatsColumns) {
    LatencyStats stats;
    stats.t_min = 1.5;
    const std::string table = latency_table(2, 10000, stats);
    EXPECT_NE(table.find(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    "
                         "t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% "
                         "percentile[usec] \n"),
              std::string::npos);
    EXPECT_NE(table.find(" 2       10000          1.50 "), std::string::npos);
}

TEST(LatencyFile, OptionTakesAPath) {
    EXPECT_EQ(parse({"--latency-file", "/tmp/lat.txt", "host"}).latency_file, "/tmp/lat.txt");
    EXPECT_EQ(parse({"--latency-file=out.txt"}).latency_file, "out.txt");
}

TEST(LatencyFile, HeaderThenOneWaySamplesInOrder) {
    const std::vector<double> round_trips{20.0, 18.5, 1234.5678, 0.001};
    EXPECT_EQ(latency_file_text(kLatencyLabel, 2, round_trips),
              "# label: step04 busy poll\n"
              "# program: step04_pingpong\n"
              "# size: 2\n"
              "# iterations: 4\n"
              "# unit: usec one-way (round trip / 2)\n"
              "10.000\n"
              "9.250\n"
              "617.284\n"
              "0.001\n");
    EXPECT_EQ(latency_file_text(kLatencyLabel, 4096, {}),
              "# label: step04 busy poll\n# program: step04_pingpong\n# size: 4096\n"
              "# iterations: 0\n# unit: usec one-way (round trip / 2)\n");
}

TEST(LatencyFile, AnUnwritablePathIsAUsageError) {
    EXPECT_EQ(open_latency_file(""), nullptr);
    try {
        (void)open_latency_file("/nonexistent-dir/lat.txt");
        FAIL() << "opened";
    } catch (const UsageError& e) {
        EXPECT_STREQ(e.what(),
                     "cannot open --latency-file '/nonexistent-dir/lat.txt': No such file or "
                     "directory");
    }
    char path[] = "/tmp/step04_latency_XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    ::close(fd);
    {
        const OutputFile file = open_latency_file(path);
        ASSERT_NE(file, nullptr);
        write_latency_file(file.get(), path, "# x\n1.000\n");
    }
    std::FILE* in = std::fopen(path, "r");
    ASSERT_NE(in, nullptr);
    std::array<char, 64> back{};
    const std::size_t got = std::fread(back.data(), 1, back.size(), in);
    std::fclose(in);
    std::remove(path);
    EXPECT_EQ(std::string(back.data(), got), "# x\n1.000\n");
}

TEST(CheckPattern, DependsOnIterationAndOffset) {
    std::vector<std::byte> message(1000);
    fill_pattern(message, 7);
    EXPECT_EQ(find_pattern_mismatch(message, 7), std::nullopt);
    EXPECT_EQ(find_pattern_mismatch(message, 8), std::optional<std::size_t>(0));
    message[600] ^= std::byte{1};
    EXPECT_EQ(find_pattern_mismatch(message, 7), std::optional<std::size_t>(600));
    std::vector<std::byte> shifted(1000);
    fill_pattern(shifted, 7 + 251);  // a whole period later: the same bytes, by design of mod
    EXPECT_EQ(find_pattern_mismatch(shifted, 7), std::nullopt);
}

TEST(CheckNegotiation, NothingOrCheckElseAPeerError) {
    EXPECT_FALSE(peer_offers_check({}, "peer"));
    EXPECT_TRUE(peer_offers_check(std::span(kCheckMessage, sizeof kCheckMessage), "peer"));
    const std::string junk = "chec";
    EXPECT_THROW((void)peer_offers_check(junk, "peer"), TutorialError);
    const std::string done_again("done", 5);
    EXPECT_THROW((void)peer_offers_check(done_again, "peer"), TutorialError);
}

// Only the last send of a session carries immediate data (the count): the peer's mark.
TEST(SessionEnd, OnlyTheLastSendIsMarked) {
    ibv_send_wr wr{};
    mark_if_last(wr, 998, 1000);
    EXPECT_EQ(wr.opcode, IBV_WR_SEND);
    mark_if_last(wr, 999, 1000);
    EXPECT_EQ(wr.opcode, IBV_WR_SEND_WITH_IMM);
    EXPECT_EQ(ntohl(wr.imm_data), 1000u);
    ibv_wc wc{};
    EXPECT_FALSE(is_last_message(wc));
    wc.wc_flags = IBV_WC_WITH_IMM;
    EXPECT_TRUE(is_last_message(wc));
}

TEST(SessionEnd, NamesThePeerAndTheCount) {
    const TutorialError client_side = peer_ended_early(true, 1000, 2000);
    EXPECT_EQ(client_side.exit_code(), kExitPeer);
    EXPECT_STREQ(
        client_side.what(),
        "the server ended the session after 1000 messages; both sides must use the same -n");
    EXPECT_EQ(client_side.hint(),
              "this side was to run 2000 (-n plus --warmup); the handshake does not carry -n");
    EXPECT_STREQ(peer_ended_early(false, 7, 9).what(),
                 "the client ended the session after 7 messages; both sides must use the same -n");
}

}  // namespace
}  // namespace tutorial
