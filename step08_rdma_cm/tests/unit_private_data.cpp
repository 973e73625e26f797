// Step 08 unit tests: the private data's layout and byte order, the magic that tells a step08
// peer from rdma-core's examples, the -s/-n mismatch lines, and the options.
#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cm_endpoint.hpp"
#include "options.hpp"
#include "private_data.hpp"

namespace {

using namespace tutorial;

Options parse(std::vector<std::string> args) {
    args.insert(args.begin(), "step08_rdma_cm");
    std::vector<char*> argv;
    for (auto& a : args) { argv.push_back(a.data()); }
    argv.push_back(nullptr);
    return parse_options(static_cast<int>(args.size()), argv.data());
}

PrivateData sample() {
    PrivateData p;
    p.rkey = 0x01020304;
    p.addr = 0x1122334455667788;
    p.length = 8;
    p.message_size = 64;
    p.iterations = 1000;
    std::strcpy(p.note, "third client");
    return p;
}

TEST(PrivateData, IsTheTableOfTheChapterBigEndian) {
    const PrivateData wire = wire_order(sample());
    std::array<unsigned char, sizeof wire> b{};
    std::memcpy(b.data(), &wire, sizeof wire);
    ASSERT_EQ(b.size(), 56u);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data()), 4), "S08C");  // 0-3
    EXPECT_EQ(b[4], 0x01);                                                       // 4-7: rkey
    EXPECT_EQ(b[7], 0x04);
    EXPECT_EQ(b[8], 0x11);  // 8-15: addr
    EXPECT_EQ(b[15], 0x88);
    EXPECT_EQ(b[19], 8);     // 16-19: length
    EXPECT_EQ(b[23], 64);    // 20-23: -s
    EXPECT_EQ(b[26], 0x03);  // 24-27: -n, 1000 = 0x3e8
    EXPECT_EQ(b[27], 0xe8);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data()) + 28), "third client");
    EXPECT_EQ(b[55], 0);
}

TEST(PrivateData, RoundTripsThroughAZeroPaddedField) {
    // A connect request's field is 56 bytes, an accept's 196: the receiver sees it all.
    std::array<std::byte, 196> field{};
    const PrivateData wire = wire_order(sample());
    std::memcpy(field.data(), &wire, sizeof wire);
    const auto got = decode_private_data(field.data(), field.size());
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->addr, 0x1122334455667788u);
    EXPECT_EQ(got->rkey, 0x01020304u);
    EXPECT_EQ(got->iterations, 1000u);
    EXPECT_STREQ(got->note, "third client");
}

TEST(PrivateData, RdmaCoreExamplesSendNone) {
    const std::array<std::byte, 56> zeros{};
    EXPECT_FALSE(decode_private_data(zeros.data(), zeros.size()).has_value());
    EXPECT_FALSE(decode_private_data(nullptr, 0).has_value());
    const PrivateData wire = wire_order(sample());
    EXPECT_FALSE(decode_private_data(&wire, 55).has_value());  // shorter than the layout
}

TEST(PrivateData, MismatchNamesTheOption) {
    PrivateData server = sample(), client = sample();
    EXPECT_EQ(describe_run_mismatch(server, client, true), "");
    client.message_size = 128;
    EXPECT_EQ(describe_run_mismatch(server, client, true),
              "the client uses -s 128, this server -s 64: both sides must use the same -s");
    client = sample();
    client.iterations = 10;
    EXPECT_EQ(describe_run_mismatch(client, server, false),
              "the server uses -n 1000, this client -n 10: both sides must use the same -n");
}

template <typename T>
concept TakenByConnectionParameters = requires(T&& wire) {
    connection_parameters(std::forward<T>(wire));
};

// rdma_conn_param keeps the private data's address: a temporary would dangle.
TEST(ConnectionParameters, PointAtTheCallersDataAndRefuseATemporary) {
    static_assert(TakenByConnectionParameters<const PrivateData&>);
    static_assert(!TakenByConnectionParameters<PrivateData>, "a temporary must not compile");
    const PrivateData wire = wire_order(sample());
    const rdma_conn_param param = connection_parameters(wire);
    EXPECT_EQ(param.private_data, &wire);
    EXPECT_EQ(param.private_data_len, sizeof wire);
}

TEST(Options, ExamplesPortAndTheNotesLimit) {
    EXPECT_EQ(parse({}).tcp_port, 7471);
    EXPECT_EQ(parse({"--note", std::string(27, 'x'), "192.0.2.1"}).note.size(), 27u);
    EXPECT_THROW(parse({"--note", std::string(28, 'x'), "192.0.2.1"}), UsageError);
    EXPECT_TRUE(parse({"--busy-poll"}).busy_poll);
    EXPECT_THROW(parse({"--busy-poll", "192.0.2.1"}), UsageError);
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
