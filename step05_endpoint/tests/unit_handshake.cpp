// Step 05 unit tests: handshake v3 and the GID choice, without a device. (ibv_rc_pingpong's
// format, wire_format.hpp, is tested once for every step: ../../tests/unit_wire_format.cpp.)
#include <gtest/gtest.h>

#include <cstring>

#include "handshake.hpp"
#include "rdma_endpoint.hpp"

namespace {

using tutorial::PeerInfo;
using tutorial::TutorialError;

PeerInfo sample() {
    PeerInfo info;
    info.lid = 0x1234;
    info.qpn = 0xabcdef;
    info.psn = 0x123456;
    const std::uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
    std::memcpy(info.gid.data(), gid, 16);
    info.mtu = IBV_MTU_4096;
    info.addr = 0x00007f1234567000;
    info.rkey = 0xdeadbeef;
    info.length = 65536;
    info.message_size = 4096;
    info.iterations = 1000;
    info.read_depth = 8;
    return info;
}

// Expects decode_handshake_v3 to throw a peer error whose message contains `needle`.
void expect_rejected(const tutorial::HandshakeV3Message& m, const std::string& needle) {
    try {
        (void)tutorial::decode_handshake_v3(m);
        FAIL() << "accepted a message that should fail with: " << needle;
    } catch (const TutorialError& e) {
        EXPECT_EQ(e.exit_code(), tutorial::kExitPeer);
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

TEST(HandshakeV3, RoundTrip) {
    const PeerInfo info = sample();
    const auto m = tutorial::encode_handshake_v3(info);
    EXPECT_EQ(m.size(), 64u);
    EXPECT_EQ(tutorial::decode_handshake_v3(m), info);
}

TEST(HandshakeV3, IsBigEndianOnTheWire) {
    const auto m = tutorial::encode_handshake_v3(sample());
    const unsigned char expected_head[] = {'R', 'D',  'M',  'A',  0, 3,    0x12, 0x34,
                                           0,   0xab, 0xcd, 0xef, 0, 0x12, 0x34, 0x56};
    EXPECT_EQ(std::memcmp(m.data(), expected_head, sizeof expected_head), 0);
    EXPECT_EQ(std::to_integer<int>(m[32]), IBV_MTU_4096);
    const unsigned char rkey[] = {0xde, 0xad, 0xbe, 0xef};
    EXPECT_EQ(std::memcmp(&m[48], rkey, 4), 0);
    const unsigned char length[] = {0, 0, 0, 0, 0, 1, 0, 0};
    EXPECT_EQ(std::memcmp(&m[56], length, 8), 0);
    const unsigned char message_size[] = {0, 0, 0x10, 0};  // -s 4096 at 36
    EXPECT_EQ(std::memcmp(&m[36], message_size, 4), 0);
    const unsigned char iterations[] = {0, 0, 0x03, 0xe8};  // -n 1000 at 52
    EXPECT_EQ(std::memcmp(&m[52], iterations, 4), 0);
    EXPECT_EQ(std::to_integer<int>(m[33]), 8);  // the RDMA READ depth
}

TEST(HandshakeV3, CarriesSizeAndIterationsIncludingZeroAndTheLargest) {
    PeerInfo info = sample();
    info.message_size = 0;  // not said: a program that is not a ping-pong
    info.iterations = 0xffffffff;
    EXPECT_EQ(tutorial::decode_handshake_v3(tutorial::encode_handshake_v3(info)), info);
    info.message_size = 1u << 30;
    info.iterations = 1;
    EXPECT_EQ(tutorial::decode_handshake_v3(tutorial::encode_handshake_v3(info)), info);
}

TEST(HandshakeV3, RejectsWrongMagic) {
    auto m = tutorial::encode_handshake_v3(sample());
    std::memcpy(m.data(), "0000", 4);  // what an ibv_rc_pingpong peer sends first
    expect_rejected(m, "bad magic 0x30303030");
    try {
        (void)tutorial::decode_handshake_v3(m);
    } catch (const TutorialError& e) {
        EXPECT_NE(e.hint().find("--rc-pingpong-compat"), std::string::npos);
    }
}

TEST(HandshakeV3, RejectsWrongVersion) {
    auto m = tutorial::encode_handshake_v3(sample());
    m[5] = std::byte{2};  // step05 and step06 before -s and -n were on the wire
    try {
        (void)tutorial::decode_handshake_v3(m);
        FAIL() << "accepted version 2";
    } catch (const TutorialError& e) {
        EXPECT_EQ(e.exit_code(), tutorial::kExitPeer);
        EXPECT_EQ(std::string(e.what()),
                  "handshake v3: the peer speaks version 2, this program speaks version 3");
        EXPECT_EQ(e.hint(), "both sides must be built from the same version of the tutorial");
    }
    m[4] = std::byte{1};
    m[5] = std::byte{0};
    expect_rejected(m, "version 256");
}

TEST(HandshakeV3, RejectsTruncatedAndLongMessages) {
    const auto m = tutorial::encode_handshake_v3(sample());
    for (std::size_t size : {0, 1, 4, 32, 63}) {
        try {
            (void)tutorial::decode_handshake_v3(std::span(m).first(size));
            FAIL() << "accepted " << size << " bytes";
        } catch (const TutorialError& e) {
            EXPECT_EQ(std::string(e.what()),
                      "handshake v3: expected 64 bytes, got " + std::to_string(size));
        }
    }
    std::array<std::byte, 65> longer{};
    std::memcpy(longer.data(), m.data(), m.size());
    EXPECT_THROW((void)tutorial::decode_handshake_v3(longer), TutorialError);
}

TEST(HandshakeV3, RejectsOutOfRangeFields) {
    PeerInfo info = sample();
    info.qpn = 0x1000000;
    expect_rejected(tutorial::encode_handshake_v3(info), "QPN 0x1000000 is out of range");
    info.qpn = 0;
    expect_rejected(tutorial::encode_handshake_v3(info), "QPN 0x000000 is out of range");
    info = sample();
    info.psn = 0xffffffff;
    expect_rejected(tutorial::encode_handshake_v3(info), "PSN 0xffffffff is over 24 bits");
    info = sample();
    info.mtu = static_cast<ibv_mtu>(6);
    expect_rejected(tutorial::encode_handshake_v3(info), "MTU code 6 is not an ibv_mtu");
    info.mtu = static_cast<ibv_mtu>(0);
    expect_rejected(tutorial::encode_handshake_v3(info), "MTU code 0 is not an ibv_mtu");
    info = sample();
    info.length = 0;
    expect_rejected(tutorial::encode_handshake_v3(info), "advertises an empty buffer");
    info = sample();
    info.addr = 0xfffffffffffff000;
    info.length = 0x2000;
    expect_rejected(tutorial::encode_handshake_v3(info), "wraps around");
    info.length = 0x1000;  // ends exactly at 2^64: allowed
    EXPECT_NO_THROW((void)tutorial::decode_handshake_v3(tutorial::encode_handshake_v3(info)));
}

TEST(HandshakeV3, CarriesTheReadDepthAndRejectsZero) {
    auto m = tutorial::encode_handshake_v3(sample());
    m[33] = std::byte{255};
    EXPECT_EQ(tutorial::decode_handshake_v3(m).read_depth, 255);
    m[33] = std::byte{0};
    expect_rejected(m, "handshake v3: the peer's RDMA READ depth is 0 (1..255)");
}

TEST(HandshakeV3, RejectsNonZeroReservedBytes) {
    for (std::size_t offset : {34, 35}) {
        auto m = tutorial::encode_handshake_v3(sample());
        m[offset] = std::byte{1};
        expect_rejected(m, "reserved byte " + std::to_string(offset) + " is 0x01, not 0");
    }
}

// ------------------------------------------------------------------ -s and -n

TEST(RunMismatch, AgreeingSidesAndUnsaidValuesPass) {
    PeerInfo mine = sample(), theirs = sample();
    EXPECT_EQ(tutorial::describe_run_mismatch(mine, theirs, true), "");
    theirs.message_size = 0;  // 0: not said, not compared
    theirs.iterations = 0;
    EXPECT_EQ(tutorial::describe_run_mismatch(mine, theirs, false), "");
    EXPECT_EQ(tutorial::describe_run_mismatch(theirs, mine, true), "");
}

TEST(RunMismatch, NamesTheOptionAndBothValuesFromEachSide) {
    PeerInfo server = sample(), client = sample();
    client.iterations = 2000;
    EXPECT_EQ(tutorial::describe_run_mismatch(server, client, true),
              "the client uses -n 2000, this server -n 1000: both sides must use the same -n");
    EXPECT_EQ(tutorial::describe_run_mismatch(client, server, false),
              "the server uses -n 1000, this client -n 2000: both sides must use the same -n");
    client.iterations = 1000;
    client.message_size = 64;
    EXPECT_EQ(tutorial::describe_run_mismatch(server, client, true),
              "the client uses -s 64, this server -s 4096: both sides must use the same -s");
    client.iterations = 5;
    EXPECT_EQ(tutorial::describe_run_mismatch(client, server, false),
              "the server uses -s 4096 -n 1000, this client -s 64 -n 5: both sides must use the "
              "same -s and -n");
}

// ------------------------------------------------------------------ GID choice (step04's gid.hpp)

tutorial::GidEntry entry(std::uint32_t index, ibv_gid_type type,
                         std::initializer_list<std::uint8_t> tail) {
    tutorial::GidEntry e;
    e.index = index;
    e.type = type;
    std::size_t at = 16 - tail.size();
    for (std::uint8_t b : tail) e.gid[at++] = b;
    return e;
}

std::optional<std::uint32_t> chosen(const std::vector<tutorial::GidEntry>& table) {
    return tutorial::choose_gid(table);
}

TEST(GidChoice, PrefersRoceV2Ipv4MappedAsInTheLab) {
    auto link_local = entry(0, IBV_GID_TYPE_ROCE_V2, {0, 0, 0, 0xff, 0xfe, 0, 0, 0});
    link_local.gid[0] = 0xfe;
    link_local.gid[1] = 0x80;
    const std::vector<tutorial::GidEntry> lab = {
        link_local, entry(1, IBV_GID_TYPE_ROCE_V2, {0xff, 0xff, 127, 0, 0, 1}),
        entry(2, IBV_GID_TYPE_ROCE_V2, {1})};
    EXPECT_EQ(chosen(lab), 1u);
}

TEST(GidChoice, FallsBackToRoceV2ThenAnythingAndSkipsZeroGids) {
    EXPECT_EQ(chosen({entry(0, IBV_GID_TYPE_ROCE_V1, {1}), entry(1, IBV_GID_TYPE_ROCE_V2, {1})}),
              1u);
    EXPECT_EQ(chosen({entry(0, IBV_GID_TYPE_IB, {}), entry(3, IBV_GID_TYPE_IB, {7})}), 3u);
    EXPECT_EQ(chosen({}), std::nullopt);
}

TEST(WorkCompletionError, NamesTheStatusTheWrIdAndACause) {
    ibv_wc wc{};
    wc.wr_id = 7;
    wc.status = IBV_WC_REM_ACCESS_ERR;
    const tutorial::WorkCompletionError e(wc, false);
    EXPECT_EQ(std::string(e.what()),
              "work completion failed: IBV_WC_REM_ACCESS_ERR (remote access error) for wr_id 7, "
              "vendor_err 0x0");
    EXPECT_EQ(e.status(), IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(e.wr_id(), 7u);
    EXPECT_EQ(e.exit_code(), tutorial::kExitRdma);
    EXPECT_NE(e.hint().find("rkey"), std::string::npos);
    EXPECT_STREQ(tutorial::WorkCompletionError::status_name(IBV_WC_RETRY_EXC_ERR),
                 "IBV_WC_RETRY_EXC_ERR");
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
