// Step 10 unit tests: the receive ring's slots and the dispatch table, without a device.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <vector>

#include "connection_table.hpp"
#include "receive_ring.hpp"

namespace {

using tutorial::ConnectionTable;
using tutorial::ReceiveRing;

std::vector<std::uint32_t> take(ReceiveRing& ring, std::size_t max) {
    std::vector<std::uint32_t> out(max);
    out.resize(ring.take_free(out));
    return out;
}

TEST(ReceiveRing, EachSlotHasItsOwnBytes) {
    const ReceiveRing ring(4, 64);
    EXPECT_EQ(ring.depth(), 4u);
    EXPECT_EQ(ring.offset(0), 0u);
    EXPECT_EQ(ring.offset(3), 192u);
    EXPECT_EQ(ring.free_count(), 4u);
    EXPECT_EQ(ring.posted(), 0u);
}

TEST(ReceiveRing, TakesEveryFreeSlotOnceThenNone) {
    ReceiveRing ring(5, 8);
    EXPECT_EQ(take(ring, 3), (std::vector<std::uint32_t>{0, 1, 2}));
    EXPECT_EQ(take(ring, 8), (std::vector<std::uint32_t>{3, 4}));
    EXPECT_TRUE(take(ring, 8).empty());
    EXPECT_EQ(ring.posted(), 5u);
}

TEST(ReceiveRing, AGivenBackSlotIsPostedAgainInTheOrderItCameBack) {
    ReceiveRing ring(4, 8);
    (void)take(ring, 4);
    ring.give_back(2);
    ring.give_back(0);
    EXPECT_EQ(ring.posted(), 2u);
    EXPECT_EQ(take(ring, 4), (std::vector<std::uint32_t>{2, 0}));
}

TEST(ReceiveRing, StaysBoundedOverManyRounds) {
    ReceiveRing ring(3, 8);
    std::set<std::uint32_t> seen;
    for (int round = 0; round < 1000; ++round) {
        for (const std::uint32_t slot : take(ring, 2)) {
            seen.insert(slot);
            ring.give_back(slot);
        }
        ASSERT_EQ(ring.free_count(), 3u);
    }
    EXPECT_EQ(seen, (std::set<std::uint32_t>{0, 1, 2}));
}

TEST(ReceiveRing, RefusesASlotThatIsNotPostedOrNotASlot) {
    ReceiveRing ring(2, 8);
    EXPECT_THROW(ring.give_back(0), std::logic_error) << "never posted";
    (void)take(ring, 1);
    ring.give_back(0);
    EXPECT_THROW(ring.give_back(0), std::logic_error) << "a second completion";
    EXPECT_THROW(ring.give_back(2), std::out_of_range);
    EXPECT_THROW(ring.give_back(std::uint64_t{1} << 63), std::out_of_range) << "a send's wr_id";
    EXPECT_THROW(ReceiveRing(0, 8), std::invalid_argument);
}

TEST(ConnectionTable, FindsTheLiveOwner) {
    ConnectionTable table;
    EXPECT_EQ(table.add(0x11, 7), 0u);
    EXPECT_EQ(table.add(0x12, 8), 0u);
    const auto e = table.find(0x12);
    EXPECT_EQ(e.found, ConnectionTable::Found::live);
    EXPECT_EQ(e.connection, 8u);
    EXPECT_EQ(table.live(), 2u);
    EXPECT_THROW(table.add(0x11, 9), std::logic_error);
}

TEST(ConnectionTable, AnUnknownNumberIsUnknown) {
    ConnectionTable table;
    (void)table.add(0x11, 7);
    EXPECT_EQ(table.find(0x99).found, ConnectionTable::Found::unknown);
    table.retire(0x99);  // ignored
    EXPECT_EQ(table.live(), 1u);
}

TEST(ConnectionTable, ALateCompletionOfARetiredQpIsNotAnothersAndAReusedNumberIsNewer) {
    ConnectionTable table;
    (void)table.add(0x11, 7);
    table.retire(0x11);
    auto e = table.find(0x11);
    EXPECT_EQ(e.found, ConnectionTable::Found::retired);
    EXPECT_EQ(e.connection, 7u);
    EXPECT_EQ(table.live(), 0u);
    // A new QP gets the same number: its completions are its own, in the next generation.
    EXPECT_EQ(table.add(0x11, 9), 1u);
    e = table.find(0x11);
    EXPECT_EQ(e.found, ConnectionTable::Found::live);
    EXPECT_EQ(e.connection, 9u);
    EXPECT_EQ(e.generation, 1u);
    table.retire(0x11);
    EXPECT_EQ(table.add(0x11, 10), 2u);
}

TEST(ConnectionTable, RemembersABoundedNumberOfRetiredQps) {
    ConnectionTable table(2);
    for (std::uint32_t qpn = 1; qpn <= 3; ++qpn) {
        (void)table.add(qpn, qpn);
        table.retire(qpn);
    }
    EXPECT_EQ(table.find(1).found, ConnectionTable::Found::unknown) << "the oldest is forgotten";
    EXPECT_EQ(table.find(2).found, ConnectionTable::Found::retired);
    EXPECT_EQ(table.find(3).found, ConnectionTable::Found::retired);
}

}  // namespace
