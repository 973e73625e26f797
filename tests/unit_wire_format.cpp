// Unit tests of wire_format.hpp, ibv_rc_pingpong's 52-byte handshake message, which steps 03-06
// and 09 carry byte-identical: formatting, strict parsing and the printable form of what arrived.
// tests/CMakeLists.txt builds this file once per step, against that step's copy
// (step03_unit_wire_format ... step09_unit_wire_format).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "wire_format.hpp"

namespace tutorial {
namespace {

std::vector<char> bytes_of(std::string_view text, bool with_nul = true) {
    std::vector<char> bytes(text.begin(), text.end());
    if (with_nul) { bytes.push_back('\0'); }
    return bytes;
}

// LID:QPN:PSN as given, then a GID field of zeros that makes the text 51 characters long.
std::vector<char> padded(std::string_view fields) {
    std::string text(fields);
    text += ':';
    text.resize(kWireMessageSize - 1, '0');
    return bytes_of(text);
}

constexpr std::string_view kValid = "0000:000011:a1b2c3:00000000000000000000ffff7f000001";

TEST(WireFormat, MessageIs52BytesWithTheNulLast) {
    EXPECT_EQ(kWireMessageSize, 52u);
    EXPECT_EQ(sizeof kDoneMessage, 5u);
}

TEST(WireFormat, FormatsLikeIbvRcPingpong) {
    QpEndpointInfo info;
    info.lid = 0x1a;
    info.qpn = 0x11;
    info.psn = 0xa1b2c3;
    info.gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
    const WireMessage message = format_wire_message(info);
    EXPECT_EQ(std::string(message.data()), "001a:000011:a1b2c3:00000000000000000000ffff7f000001");
    EXPECT_EQ(message.back(), '\0');
}

TEST(WireFormat, RoundTrips) {
    QpEndpointInfo info;
    info.lid = 0xbeef;
    info.qpn = 0xfffffe;
    info.psn = 0xffffff;
    for (std::size_t i = 0; i < info.gid.size(); ++i) {
        info.gid[i] = static_cast<std::uint8_t>(0xf0 + i);
    }
    const WireMessage message = format_wire_message(info);
    std::string error;
    const auto parsed = parse_wire_message(message, error);
    ASSERT_TRUE(parsed) << error;
    EXPECT_EQ(parsed->lid, info.lid);
    EXPECT_EQ(parsed->qpn, info.qpn);
    EXPECT_EQ(parsed->psn, info.psn);
    EXPECT_EQ(parsed->gid, info.gid);
}

TEST(WireFormat, ParsesTheMessageCapturedFromIbvRcPingpong) {
    // Bytes an ibv_rc_pingpong server (rdma-core 44) sent in the lab, NUL included.
    const auto bytes = bytes_of("0000:000013:03802a:00000000000000000000ffff7f000001");
    std::string error;
    const auto parsed = parse_wire_message(bytes, error);
    ASSERT_TRUE(parsed) << error;
    EXPECT_EQ(parsed->lid, 0);
    EXPECT_EQ(parsed->qpn, 0x13u);
    EXPECT_EQ(parsed->psn, 0x03802au);
    EXPECT_EQ(format_gid(parsed->gid), "::ffff:127.0.0.1");
}

TEST(WireFormat, AcceptsUppercaseHex) {
    std::string error;
    EXPECT_TRUE(
        parse_wire_message(bytes_of("00AB:0000FF:ABCDEF:FE800000000000000200FFFEFE000000"), error))
        << error;
}

struct Malformed {
    const char* name;
    std::vector<char> bytes;
    const char* expected_error;  // a substring of the error
};

std::vector<Malformed> malformed_messages() {
    std::vector<char> no_nul = bytes_of(kValid, false);
    no_nul.push_back('x');
    std::vector<char> inner_nul = bytes_of(kValid);
    inner_nul[20] = '\0';
    std::vector<char> control = bytes_of(kValid);
    control[2] = '\x01';
    std::vector<char> high_bit = bytes_of(kValid);
    high_bit[30] = static_cast<char>(0xc3);
    return {
        {"empty", {}, "expected 52 bytes, got 0"},
        {"short", bytes_of("0000:000011:a1b2c3:0000"), "expected 52 bytes, got 24"},
        {"long", bytes_of(std::string(kValid) + "0"), "expected 52 bytes, got 53"},
        {"no NUL, only the text", bytes_of(kValid, false), "expected 52 bytes, got 51"},
        {"last byte not NUL", no_nul, "does not end with a NUL"},
        {"NUL inside", inner_nul, "NUL byte at offset 20"},
        {"non-hex LID", bytes_of("00g0:000011:a1b2c3:00000000000000000000ffff7f000001"),
         "LID is not hex"},
        {"non-hex QPN", bytes_of("0000:00z011:a1b2c3:00000000000000000000ffff7f000001"),
         "QPN is not hex"},
        {"non-hex PSN", bytes_of("0000:000011:a1b2c?:00000000000000000000ffff7f000001"),
         "PSN is not hex"},
        {"QPN out of range", padded("0000:1000000:a1b2c3"),
         "QPN is out of range (at most 0xffffff)"},
        {"PSN out of range", padded("0000:000011:1a1b2c3"),
         "PSN is out of range (at most 0xffffff)"},
        {"QPN too short", bytes_of("0000:00011:a1b2c3:000000000000000000000ffff7f000001"),
         "QPN must be exactly 6 hex digits, got 5"},
        {"QPN with leading zeros too long",
         bytes_of("0000:0000011:1b2c3:00000000000000000000ffff7f000001"),
         "QPN must be exactly 6 hex digits, got 7"},
        {"LID too long", bytes_of("00000:00011:a1b2c3:00000000000000000000ffff7f000001"),
         "LID must be exactly 4 hex digits, got 5"},
        {"empty LID", padded(":000011:a1b2c3"), "LID is empty"},
        {"spaces instead of zeros", bytes_of("   0:000011:a1b2c3:00000000000000000000ffff7f000001"),
         "LID is not hex"},
        {"sign", bytes_of("0000:+00011:a1b2c3:00000000000000000000ffff7f000001"), "QPN is not hex"},
        {"0x prefix", bytes_of("0000:0x0011:a1b2c3:00000000000000000000ffff7f000001"),
         "QPN is not hex"},
        {"QPN 0 is QP0", bytes_of("0000:000000:a1b2c3:00000000000000000000ffff7f000001"),
         "special QP"},
        {"QPN 1 is QP1", bytes_of("0000:000001:a1b2c3:00000000000000000000ffff7f000001"),
         "special QP"},
        {"GID with a colon", bytes_of("0000:000011:a1b2c3:0000000000000000000:ffff7f000001"),
         "GID is not hex"},
        {"GID with a letter", bytes_of("0000:000011:a1b2c3:00000000000000000000ffff7f00000g"),
         "GID is not hex"},
        {"GID as text", padded("0000:000011:a1b2c3:::ffff:127.0.0.1"), "GID is not hex"},
        {"GID too short", bytes_of("0000:000011:a1b2c3:0000000000000000000ffff7f000001:"),
         "GID is not hex"},
        {"three fields", padded("0000:000011a1b2c3"), "expected 4 fields"},
        {"control character", control, "LID is not hex"},
        {"high-bit byte", high_bit, "GID is not hex"},
        {"all garbage", std::vector<char>(52, '\xff'), "does not end with a NUL"},
        {"HTTP request", bytes_of("GET / HTTP/1.1\r\nHost: x\r\n\r\n------------------------"),
         "expected 4 fields"},
    };
}

TEST(WireFormat, RejectsMalformedMessagesAndSaysWhy) {
    const std::vector<Malformed> cases = malformed_messages();
    ASSERT_GE(cases.size(), 15u);
    for (const Malformed& c : cases) {
        std::string error;
        EXPECT_FALSE(parse_wire_message(c.bytes, error)) << c.name;
        EXPECT_NE(error.find(c.expected_error), std::string::npos)
            << c.name << ": error was '" << error << "'";
    }
}

TEST(WireFormat, PrintableBytesShowsWhatArrived) {
    const std::vector<char> bytes = {'a', '\0', '\x01', '"', '\xff'};
    EXPECT_EQ(printable_bytes(bytes), "\"a\\0\\x01\\\"\\xff\"");
    EXPECT_EQ(printable_bytes(std::vector<char>(70, 'x'), 4), "\"xxxx\"...");
}

// --rc-pingpong-compat (step05 on) speaks this format too.
std::span<const char> as_message(const std::string& text) { return {text.data(), text.size()}; }

TEST(RcPingpongFormat, MatchesTheReferenceBinary) {
    // Captured in the lab from ibv_rc_pingpong -g 1 (a client's first message).
    const std::string captured("0000:000011:1a91a5:00000000000000000000ffff7f000001\0", 52);
    std::string error;
    const auto info = tutorial::parse_wire_message(as_message(captured), error);
    ASSERT_TRUE(info.has_value()) << error;
    EXPECT_EQ(info->lid, 0);
    EXPECT_EQ(info->qpn, 0x11u);
    EXPECT_EQ(info->psn, 0x1a91a5u);
    EXPECT_EQ(tutorial::format_gid(info->gid), "::ffff:127.0.0.1");
    const auto formatted = tutorial::format_wire_message(*info);
    EXPECT_EQ(std::string(formatted.data(), formatted.size()), captured);
}

TEST(RcPingpongFormat, AcceptsUpperCaseHex) {
    const std::string upper("FFFF:ABCDEF:000001:FE800000000000000200FFFFFE000000\0", 52);
    std::string error;
    const auto info = tutorial::parse_wire_message(as_message(upper), error);
    ASSERT_TRUE(info.has_value()) << error;
    EXPECT_EQ(info->lid, 0xffff);
    EXPECT_EQ(info->qpn, 0xabcdefu);
    EXPECT_EQ(tutorial::format_gid(info->gid), "fe80::200:ffff:fe00:0");
}

TEST(RcPingpongFormat, RejectsMalformedMessages) {
    const std::string good("0000:000011:1a91a5:00000000000000000000ffff7f000001\0", 52);
    const std::vector<std::pair<std::string, std::string>> cases = {
        {good.substr(0, 51), "expected 52 bytes, got 51"},
        {good + "x", "expected 52 bytes, got 53"},
        {std::string(good).replace(51, 1, "x"), "the message does not end with a NUL byte"},
        {std::string(good).replace(18, 1, " "),
         "expected 4 fields LID:QPN:PSN:GID separated by ':', found 3"},
        {std::string(good).replace(0, 1, "g"), "LID is not hex ('g000')"},
        {std::string(good).replace(6, 1, " "), "QPN is not hex ('0 0011')"},
        {std::string(good).replace(12, 1, "-"), "PSN is not hex ('-a91a5')"},
        {std::string(good).replace(40, 1, "z"), "GID is not hex"},
        {std::string(good).replace(50, 1, std::string(1, '\0')), "NUL byte at offset 50"},
        {std::string(good).replace(5, 6, "000000"), "QPN 0 is a special QP"},
        {std::string(52, '\0'), "NUL byte at offset 0"},
    };
    for (const auto& [message, needle] : cases) {
        std::string error;
        EXPECT_FALSE(tutorial::parse_wire_message(as_message(message), error).has_value())
            << "accepted a bad message; expected: " << needle;
        EXPECT_NE(error.find(needle), std::string::npos)
            << "wanted '" << needle << "' in: " << error;
    }
}

TEST(WireFormat, ServerParsesWhatTheClientFormats) {
    // step06's server feeds its non-blocking handshake's bytes to this parser.
    QpEndpointInfo info;
    info.lid = 0x12;
    info.qpn = 0xabcdef;
    info.psn = 0x123456;
    info.gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
    const WireMessage msg = format_wire_message(info);
    ASSERT_EQ(msg.size(), kWireMessageSize);
    EXPECT_STREQ(msg.data(), "0012:abcdef:123456:00000000000000000000ffff7f000001");
    std::string error;
    const std::optional<QpEndpointInfo> back = parse_wire_message(msg, error);
    ASSERT_TRUE(back) << error;
    EXPECT_EQ(back->qpn, info.qpn);
    EXPECT_EQ(back->psn, info.psn);
    EXPECT_EQ(back->gid, info.gid);
    const std::string garbage = "GET / HTTP/1.1\r\nHost: x\r\n\r\n012345678901234567890123";
    EXPECT_FALSE(
        parse_wire_message(std::span<const char>(garbage.data(), kWireMessageSize), error));
    EXPECT_FALSE(error.empty());
}

TEST(WireFormat, PrintableEscapesWhatAPeerSent) {
    const std::string s = std::string("ab\n\x01", 4);
    EXPECT_EQ(printable_bytes(s), "\"ab\\x0a\\x01\"");
    EXPECT_EQ(printable_bytes(std::string(70, 'x')), '"' + std::string(64, 'x') + "\"...");
}

}  // namespace
}  // namespace tutorial
