// Step 07 unit tests: the final count's check, without a device.
#include <gtest/gtest.h>

#include <cstdint>

#include "../bandwidth.hpp"

namespace {

using tutorial::checked_send_count;
using tutorial::TutorialError;

constexpr std::uint64_t kWrap = std::uint64_t{1} << 32;

// The immediate the client's final carries for a count: its low 32 bits, as post_final() puts
// them in imm_data (before htonl).
std::uint32_t immediate_for(std::uint64_t count) { return static_cast<std::uint32_t>(count); }

TEST(FinalCount, MatchingCountsAreAddedUp) {
    EXPECT_EQ(checked_send_count(immediate_for(1000), 1000, 1000), 1000u);
    EXPECT_EQ(checked_send_count(immediate_for(7), 7, 0), 7u);  // -D: no -n to compare
}

// Issue 33: with -D a QP may send more than 2^32 SENDs. The immediate holds the count modulo
// 2^32; the target's own 64-bit count is the QP's total.
TEST(FinalCount, ACountPast2To32IsNoMismatchAndKeepsItsTotal) {
    EXPECT_EQ(checked_send_count(immediate_for(kWrap + 5), kWrap + 5, 0), kWrap + 5);
    EXPECT_EQ(checked_send_count(immediate_for(kWrap), kWrap, 0), kWrap);
}

TEST(FinalCount, AMismatchNamesBothCounts) {
    try {
        (void)checked_send_count(immediate_for(999), 1000, 0);
        FAIL() << "no mismatch reported";
    } catch (const TutorialError& e) {
        EXPECT_STREQ(e.what(), "the client says it sent 999 messages on a QP, 1000 arrived");
    }
    // Equal modulo 2^32 only because the target lost 2^32 SENDs: still a mismatch with -n.
    EXPECT_THROW((void)checked_send_count(immediate_for(5), kWrap + 5, 5), TutorialError);
    EXPECT_THROW((void)checked_send_count(immediate_for(1000), 1000, 2000), TutorialError);
}

}  // namespace
