// Step 05 unit tests: the program's option parsing, statistics and payload patterns.
#define RDMA_TUTORIAL_UNIT_TEST
#include "../main.cpp"

#include <gtest/gtest.h>

namespace {

using tutorial::Operation;
using tutorial::Options;
using tutorial::UsageError;

Options parse(std::vector<std::string> args) {
    args.insert(args.begin(), "step05_endpoint");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    return tutorial::parse_options(static_cast<int>(args.size()), argv.data());
}

std::string usage_error(std::vector<std::string> args) {
    try {
        (void)parse(std::move(args));
    } catch (const UsageError& e) { return e.what(); }
    return "(accepted)";
}

TEST(Options, DefaultsMatchRcPingpong) {
    const Options o = parse({});
    EXPECT_EQ(o.size, 4096u);
    EXPECT_EQ(o.iters, 1000);
    EXPECT_EQ(o.rx_depth, 500);
    EXPECT_EQ(o.tx_depth, 16);
    EXPECT_EQ(o.mtu, 1024);
    EXPECT_EQ(o.tcp_port, 18515);
    EXPECT_EQ(o.ib_port, 1);
    EXPECT_EQ(o.gid_index, -1);
    EXPECT_EQ(o.op, Operation::pingpong);
    EXPECT_FALSE(o.rc_pingpong_compat);
    EXPECT_TRUE(o.host.empty());
}

TEST(Options, ParsesEveryOption) {
    const Options o = parse({"-d", "rxe0",  "-i",        "2",    "-g",   "1",    "-s", "64",
                             "-n", "10",    "-m",        "4096", "-r",   "16",   "-t", "4",
                             "-p", "20000", "--timeout", "3",    "--op", "read", "-v", "server1"});
    EXPECT_EQ(o.device_name, "rxe0");
    EXPECT_EQ(o.ib_port, 2);
    EXPECT_EQ(o.gid_index, 1);
    EXPECT_EQ(o.size, 64u);
    EXPECT_EQ(o.iters, 10);
    EXPECT_EQ(o.mtu, 4096);
    EXPECT_EQ(o.rx_depth, 16);
    EXPECT_EQ(o.tx_depth, 4);
    EXPECT_EQ(o.tcp_port, 20000);
    EXPECT_EQ(o.timeout_seconds, 3);
    EXPECT_EQ(o.op, Operation::read);
    EXPECT_TRUE(o.verbose);
    EXPECT_EQ(o.host, "server1");
    EXPECT_EQ(parse({"--bind", "127.0.0.1"}).bind_address, "127.0.0.1");
    EXPECT_TRUE(parse({"--rc-pingpong-compat"}).rc_pingpong_compat);
    EXPECT_FALSE(parse({}).check);
    EXPECT_TRUE(parse({"--check", "host"}).check);
    EXPECT_EQ(parse({"--op=write"}).op, Operation::write);
}

TEST(Options, RejectsBadValuesStrictly) {
    // step04's parse_number and its message.
    EXPECT_EQ(usage_error({"-s", "12abc"}),
              "--size must be a whole number from 1 to 1073741824 (got '12abc')");
    EXPECT_EQ(usage_error({"-n", "0"}),
              "--iters must be a whole number from 1 to 100000000 (got '0')");
    EXPECT_EQ(usage_error({"-p", "70000"}),
              "--port must be a whole number from 1 to 65535 (got '70000')");
    EXPECT_EQ(usage_error({"-m", "1000"}),
              "--mtu must be 256, 512, 1024, 2048 or 4096 (got '1000')");
    EXPECT_EQ(usage_error({"-s", ""}),
              "--size must be a whole number from 1 to 1073741824 (got '')");
    EXPECT_EQ(usage_error({"--op", "atomic"}),
              "--op must be pingpong, write or read (got 'atomic')");
    EXPECT_EQ(usage_error({"-x"}), "unknown option '-x'");
    EXPECT_EQ(usage_error({"-vx", "host"}), "unknown option '-x'") << "the option, not the cluster";
    EXPECT_EQ(usage_error({"--frobnicate"}), "unknown option '--frobnicate'");
    EXPECT_EQ(usage_error({"--rc-pingpong-compat=1"}),
              "option '--rc-pingpong-compat' takes no value");
    EXPECT_EQ(usage_error({"-s"}), "option '-s' needs a value");
    EXPECT_EQ(usage_error({"--size"}), "option '--size' needs a value");
    EXPECT_EQ(usage_error({"a", "b"}), "unexpected argument 'b'");
    EXPECT_EQ(usage_error({"--bind", "127.0.0.1", "host"}),
              "--bind is for the server; a client (HOST given) does not listen");
    EXPECT_EQ(usage_error({"--rc-pingpong-compat", "--op", "write"}),
              "--rc-pingpong-compat carries no buffer address or rkey: it works with --op "
              "pingpong only");
    EXPECT_EQ(usage_error({"--check", "--op", "read"}),
              "--check is for --op pingpong (write and read always verify the data)");
}

TEST(Options, GrantsRemoteAccessOnlyWhereNeeded) {
    EXPECT_EQ(tutorial::endpoint_config(parse({})).access, IBV_ACCESS_LOCAL_WRITE);
    EXPECT_EQ(tutorial::endpoint_config(parse({"host"})).access, IBV_ACCESS_LOCAL_WRITE);
    EXPECT_EQ(tutorial::endpoint_config(parse({"--op", "write"})).access,
              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    EXPECT_EQ(tutorial::endpoint_config(parse({"--op", "read"})).access,
              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    EXPECT_EQ(tutorial::endpoint_config(parse({"--op", "write", "host"})).access,
              IBV_ACCESS_LOCAL_WRITE);
    EXPECT_EQ(tutorial::handshake_settings(parse({"--rc-pingpong-compat"})).format,
              tutorial::HandshakeFormat::rc_pingpong);
}

TEST(Options, HandshakeCarriesSizeAndIterations) {
    const tutorial::HandshakeSettings settings =
        tutorial::handshake_settings(parse({"-s", "64", "-n", "7", "--timeout", "3"}));
    EXPECT_EQ(settings.message_size, 64u);
    EXPECT_EQ(settings.iterations, 7u);
    EXPECT_EQ(settings.timeout, std::chrono::seconds(3));
    EXPECT_EQ(settings.format, tutorial::HandshakeFormat::v3);
}

TEST(Stats, KnownSamplesAsStep04AndPerftest) {
    std::vector<double> round_trips;
    for (int i = 100; i >= 1; --i) round_trips.push_back(i);  // 1..100 us, unsorted
    const auto s = tutorial::compute_latency_stats(round_trips);
    EXPECT_EQ(s.samples, 98u);             // the 2 largest are dropped
    EXPECT_DOUBLE_EQ(s.t_min, 0.5);        // halved: one way
    EXPECT_DOUBLE_EQ(s.t_max, 49.5);       // sample[m]
    EXPECT_DOUBLE_EQ(s.t_typical, 24.75);  // (sample[48] + sample[49]) / 2, halved
    EXPECT_DOUBLE_EQ(s.t_avg, 24.75);
    EXPECT_DOUBLE_EQ(s.p99, 49.5);   // sample[ceil(97.02)] = sample[98]
    EXPECT_DOUBLE_EQ(s.p999, 49.5);  // clamped to the last sample
    const auto one = tutorial::compute_latency_stats({7.0});
    EXPECT_DOUBLE_EQ(one.t_typical, 3.5);
    // ib_read_lat's rtt_factor 1: a READ's post-to-completion time is the figure, not halved.
    const auto whole = tutorial::compute_latency_stats(round_trips, 1);
    EXPECT_DOUBLE_EQ(whole.t_min, 1);
    EXPECT_DOUBLE_EQ(whole.t_typical, 49.5);
    EXPECT_EQ(tutorial::compute_latency_stats({}).samples, 0u);
    EXPECT_EQ(tutorial::rc_pingpong_summary(4096, 1000, 2000000.0),
              "8192000 bytes in 2.00 seconds = 32.77 Mbit/sec\n"
              "1000 iters in 2.00 seconds = 2000.00 usec/iter\n");
}

TEST(Pattern, VerifiesAndNamesTheFirstBadByte) {
    std::vector<std::byte> buffer(300);
    tutorial::fill_pattern(buffer, 42);
    EXPECT_NO_THROW(tutorial::verify_pattern(buffer, 42, "buf"));
    EXPECT_THROW(tutorial::verify_pattern(buffer, 43, "buf"), tutorial::TutorialError);
    buffer[257] ^= std::byte{0xff};
    try {
        tutorial::verify_pattern(buffer, 42, "buf");
        FAIL();
    } catch (const tutorial::TutorialError& e) {
        EXPECT_NE(std::string(e.what()).find("buf: byte 257 is 0x"), std::string::npos) << e.what();
    }
}

TEST(Pattern, PingPongCheckTellsTheSidesAndIterationsApart) {
    std::vector<std::byte> message(64);
    using tutorial::PingPong;
    tutorial::fill_pattern(message, PingPong::pattern_id(3, true));
    EXPECT_NO_THROW(tutorial::check_pingpong_message(message, 3, PingPong::pattern_id(3, true)));
    const auto error_of = [&](long long iteration, bool from_client) {
        try {
            tutorial::check_pingpong_message(message, iteration,
                                             PingPong::pattern_id(iteration, from_client));
        } catch (const tutorial::TutorialError& e) {
            EXPECT_EQ(e.exit_code(), tutorial::kExitPeer);
            EXPECT_EQ(e.hint(), "start both sides with --check (ibv_rc_pingpong has none)");
            return std::string(e.what());
        }
        return std::string("(passed)");
    };
    // The server's message 3, an echo of the client's, and the client's message 4 all differ.
    EXPECT_EQ(error_of(3, false), "--check: message 3 is wrong at byte 0");
    EXPECT_EQ(error_of(4, true), "--check: message 4 is wrong at byte 0");
    message[40] ^= std::byte{1};
    EXPECT_EQ(error_of(3, true), "--check: message 3 is wrong at byte 40");
    // A server without --check sends a zeroed buffer: the client's check of its first message
    // fails at once.
    std::vector<std::byte> zeros(1);
    EXPECT_EQ(tutorial::find_pattern_mismatch(zeros, PingPong::pattern_id(0, false)), 0u);
}

}  // namespace
