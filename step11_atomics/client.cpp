// The client: --connections QPs on one CQ act on the server's target with one-sided verbs, one
// --op per run: the lost update, fetch-and-add, a CAS lock under a seqlock, or a memory window.
#include <algorithm>
#include <array>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "atomics.hpp"
#include "connection.hpp"
#include "handshake.hpp"
#include "memory_window.hpp"
#include "options.hpp"
#include "qp_transitions.hpp"
#include "run_config.hpp"
#include "shared_cq.hpp"
#include "stats.hpp"
#include "target.hpp"
#include "tcp.hpp"

namespace tutorial {

namespace {

/// One connection to the server: its QP, the TCP connection its session lives on, and the
/// target that the handshake's answer named (address, length, rkey).
struct Link {
    std::unique_ptr<Connection> connection;
    Socket server;
    [[nodiscard]] RemoteWord at(std::uint64_t offset) const {
        return {connection->remote_info()->addr + offset, connection->remote_info()->rkey};
    }
    [[nodiscard]] ibv_qp* qp() const { return connection->qp(); }
};

/// The client's registered memory: a page per connection, where READs and the atomics' original
/// values land and where records are written from.
class LocalMemory {
  public:
    LocalMemory(const Device& device, std::uint32_t connections)
        : bytes_(allocate_buffer(kPage * connections)) {
        mr_.reset(
            ibv_reg_mr(device.pd(), bytes_.get(), kPage * connections, IBV_ACCESS_LOCAL_WRITE));
        if (!mr_) { throw_reg_mr_error(errno, kPage * connections); }
    }
    /// Connection \p i's word \p k (0..31): 8-byte aligned.
    [[nodiscard]] LocalWord word(std::uint32_t i, std::uint32_t k) const {
        return {reinterpret_cast<std::uint64_t*>(page(i) + std::size_t{8} * k), mr_->lkey};
    }
    /// Connection \p i's record: the second half of its page.
    [[nodiscard]] std::byte* record(std::uint32_t i) const { return page(i) + kPage / 2; }
    [[nodiscard]] std::uint32_t lkey() const { return mr_->lkey; }

  private:
    [[nodiscard]] std::byte* page(std::uint32_t i) const { return bytes_.get() + kPage * i; }
    Buffer bytes_;
    MemoryRegion mr_;
};

/// Opens one connection: a QP that grants nothing, step05's handshake v3 and "done".
Link open_link(const Device& device, SharedCompletionQueue& cq, const Options& o) {
    Link link;
    link.connection =
        std::make_unique<Connection>(device, cq.get(), static_cast<std::uint32_t>(o.tx_depth),
                                     *mtu_from_bytes(o.mtu), 0, Exposed{0, kPage, 0});
    link.server = connect_to_peer(*link.connection, o.host, static_cast<std::uint16_t>(o.tcp_port),
                                  handshake_settings(o));
    return link;
}

/// Polls the CQ until at least \p minimum completions have come, each to \p handle, and returns
/// how many came. A failed one ends the run; so do --timeout without a completion and a stop
/// signal.
template <typename Handle>
std::uint32_t reap(SharedCompletionQueue& cq, std::uint32_t minimum, const Options& o,
                   Handle&& handle) {
    std::array<ibv_wc, 16> batch{};
    std::uint32_t taken = 0;
    auto deadline = Clock::now() + std::chrono::seconds(o.timeout_seconds);
    for (std::uint32_t spins = 0; taken < minimum; ++spins) {
        const int n = cq.poll(batch);
        for (int k = 0; k < n; ++k) {
            const ibv_wc& wc = batch[static_cast<std::size_t>(k)];
            if (wc.status != IBV_WC_SUCCESS) { throw WorkCompletionError(wc, false); }
            handle(wc);
        }
        taken += static_cast<std::uint32_t>(n);
        if (n > 0) {
            deadline = Clock::now() + std::chrono::seconds(o.timeout_seconds);
        } else if ((spins & 1023) == 0) {
            throw_if_stopped();
            if (Clock::now() > deadline) {
                throw TutorialError(kExitTimeout, "no completion within --timeout");
            }
        }
    }
    return taken;
}

/// One READ of the counter, on the first connection.
std::uint64_t read_counter(const Link& link, SharedCompletionQueue& cq, const LocalMemory& memory,
                           const Options& o) {
    const LocalWord into = memory.word(0, 31);
    post_read(link.qp(), into.value, 8, into.lkey, link.at(o.offset), 0);
    reap(cq, 1, o, [](const ibv_wc&) {});
    return *into.value;
}

void print_count(const char* op, std::uint64_t before, std::uint64_t after, const Options& o) {
    const std::uint64_t expected = std::uint64_t{o.iters} * o.connections;
    const std::uint64_t added = after - before;
    std::printf("client: %s: counter %" PRIu64 " -> %" PRIu64 ": %" PRIu64 " of %u x %u = %" PRIu64
                " updates landed, %" PRIu64 " lost\n",
                op, before, after, added, o.connections, o.iters, expected,
                expected > added ? expected - added : 0);
}

//! [read_write]
/// The lost update: each connection READs the counter, adds 1 and WRITEs it back. The
/// connections go in lockstep, every READ of a round before any WRITE: each round, all of them
/// read the same value and write the same value + 1, and all but one of the round's updates
/// are lost.
void run_read_write(std::vector<Link>& links, SharedCompletionQueue& cq, const LocalMemory& memory,
                    const Options& o) {
    const std::uint64_t before = read_counter(links[0], cq, memory, o);
    const auto c = static_cast<std::uint32_t>(links.size());
    for (std::uint32_t m = 0; m < o.iters; ++m) {
        for (std::uint32_t i = 0; i < c; ++i) {
            const LocalWord mine = memory.word(i, 0);
            post_read(links[i].qp(), mine.value, 8, mine.lkey, links[i].at(o.offset), i);
        }
        reap(cq, c, o, [](const ibv_wc&) {});
        for (std::uint32_t i = 0; i < c; ++i) {
            const LocalWord mine = memory.word(i, 0);
            *mine.value += 1;  // the update, made here, between the READ and the WRITE
            post_write(links[i].qp(), mine.value, 8, mine.lkey, links[i].at(o.offset), i);
        }
        reap(cq, c, o, [](const ibv_wc&) {});
    }
    print_count("read-write", before, read_counter(links[0], cq, memory, o), o);
}
//! [read_write]

/// The latency table (one-sided: a sample is the whole round trip, not halved) and the rate.
void print_figures(const char* op, std::vector<double>& samples, std::uint64_t count,
                   double seconds) {
    if (!samples.empty()) {
        std::printf("%s", latency_table(8, static_cast<long long>(samples.size()),
                                        compute_latency_stats(samples, 1))
                              .c_str());
    }
    std::printf("client: %s: %" PRIu64 " in %.3f s = %.4f Mops/s\n", op, count, seconds,
                static_cast<double>(count) / seconds / 1e6);
}

//! [fetch_add]
/// FETCH_AND_ADD 1, up to --window of them in flight on each connection (at most the read
/// depth both sides agreed on: atomics count against max_rd_atomic, as READs do). Every
/// original value the device returns is distinct: each add saw a different count.
int run_fetch_add(std::vector<Link>& links, SharedCompletionQueue& cq, const LocalMemory& memory,
                  const Options& o) {
    const std::uint64_t before = read_counter(links[0], cq, memory, o);
    const auto c = static_cast<std::uint32_t>(links.size());
    std::vector<std::uint32_t> posted(c, 0), done(c, 0);
    std::vector<std::array<Clock::time_point, 32>> posted_at(c);
    std::vector<std::uint64_t> originals;
    std::vector<double> samples;
    originals.reserve(std::uint64_t{o.iters} * c);
    samples.reserve(o.window == 1 ? std::uint64_t{o.iters} * c : 0);
    const auto start = Clock::now();
    while (originals.size() < std::uint64_t{o.iters} * c) {
        for (std::uint32_t i = 0; i < c; ++i) {
            const std::uint32_t window =
                std::min<std::uint32_t>(o.window, links[i].connection->read_depth());
            while (posted[i] < o.iters && posted[i] - done[i] < window) {
                const std::uint32_t slot = posted[i]++ % 32;  // its original value's word
                if (o.window == 1) { posted_at[i][slot] = Clock::now(); }  // latency samples only
                post_fetch_add(links[i].qp(), memory.word(i, slot), links[i].at(o.offset), 1,
                               std::uint64_t{slot} << 32 | i);
            }
        }
        reap(cq, 1, o, [&](const ibv_wc& wc) {
            const auto i = static_cast<std::uint32_t>(wc.wr_id);
            const auto slot = static_cast<std::uint32_t>(wc.wr_id >> 32);
            if (o.window == 1) {
                samples.push_back(
                    std::chrono::duration<double, std::micro>(Clock::now() - posted_at[i][slot])
                        .count());
            }
            originals.push_back(*memory.word(i, slot).value);
            ++done[i];
        });
    }
    const std::chrono::duration<double> elapsed = Clock::now() - start;
    const std::uint64_t after = read_counter(links[0], cq, memory, o);
    print_figures("fetch-add", samples, originals.size(), elapsed.count());
    print_count("fetch-add", before, after, o);
    std::sort(originals.begin(), originals.end());
    const bool distinct = std::adjacent_find(originals.begin(), originals.end()) == originals.end();
    std::printf("client: fetch-add: the %zu original values are %s\n", originals.size(),
                distinct ? "all distinct" : "NOT distinct: two adds saw the same count");
    return distinct && after - before == originals.size() ? kExitOk : kExitRdma;
}
//! [fetch_add]

//! [seqlock_steps]
/// One connection's place in the seqlock run: writers take the lock, make the version odd,
/// write the record, make the version even and release the lock; readers read the version, the
/// record and the version again. Each step is posted after the one before completed.
enum class Step { lock, odd, write, even, unlock, version_before, record, version_after, finished };

struct SeqlockMember {
    bool writer = false;
    Step step = Step::lock;
    std::uint64_t id = 0;          // a writer's value in the lock word: its QPN + 1, never 0
    std::uint32_t written = 0;     // records written (writers)
    Clock::time_point held_since;  // when a writer first found the lock held by `holder`
    std::uint64_t holder = 0;
};

struct SeqlockTally {
    std::uint64_t accepted = 0, torn = 0, mixed = 0, lock_busy = 0;
    std::vector<double> cas_samples;
};
//! [seqlock_steps]

/// How long a writer waits between records, for each writer, while there are readers.
constexpr std::chrono::microseconds kWriterRest{200};
constexpr std::chrono::microseconds kNoRest{0};

//! [seqlock_post]
void post_step(const Link& link, const SeqlockMember& m, const LocalMemory& memory,
               std::uint32_t i) {
    const LocalWord scratch = memory.word(i, 0);
    switch (m.step) {
        case Step::lock:
            post_compare_swap(link.qp(), scratch, link.at(kLockOffset), 0, m.id, i);
            break;
        case Step::odd:
        case Step::even: post_fetch_add(link.qp(), scratch, link.at(kVersionOffset), 1, i); break;
        case Step::write:
            post_write(link.qp(), memory.record(i), kRecordBytes, memory.lkey(),
                       link.at(kRecordOffset), i);
            break;
        case Step::unlock:
            post_compare_swap(link.qp(), scratch, link.at(kLockOffset), m.id, 0, i);
            break;
        case Step::version_before:
        case Step::version_after: {
            const LocalWord into = memory.word(i, m.step == Step::version_before ? 1 : 2);
            post_read(link.qp(), into.value, 8, into.lkey, link.at(kVersionOffset), i);
            break;
        }
        case Step::record:
            post_read(link.qp(), memory.record(i), kRecordBytes, memory.lkey(),
                      link.at(kRecordOffset), i);
            break;
        case Step::finished: break;
    }
}
//! [seqlock_post]

/// A writer's record k: 256 copies of one byte, different from the record before.
void fill_record(std::byte* record, std::uint32_t i, std::uint32_t k) {
    std::memset(record, static_cast<int>((i * 100 + k) % 251 + 1), kRecordBytes);
}

//! [seqlock_done]
/// What a step's completion means, and the member's next step.
void on_step_done(SeqlockMember& m, const LocalMemory& memory, std::uint32_t i, bool writers_done,
                  SeqlockTally& tally, const Options& o) {
    const std::uint64_t original = *memory.word(i, 0).value;
    switch (m.step) {
        case Step::lock:
            if (original == 0) {  // the lock was free: the swap happened, it is ours
                m.step = Step::odd;
                m.holder = 0;
                break;
            }
            ++tally.lock_busy;  // a failed CAS returns the holder's id: try again
            if (original != m.holder) {
                m.holder = original;
                m.held_since = Clock::now();
            } else if (Clock::now() - m.held_since > std::chrono::seconds(o.timeout_seconds)) {
                char holder[32];
                std::snprintf(holder, sizeof holder, "0x%" PRIx64, original);
                throw TutorialError(kExitTimeout,
                                    std::string("the lock has been held by ") + holder + " for " +
                                        std::to_string(o.timeout_seconds) +
                                        " s (--timeout): its holder may have died holding it",
                                    "a real system gives the lock a lease that expires");
            }
            break;
        case Step::odd: m.step = Step::write; break;
        case Step::write: m.step = Step::even; break;
        case Step::even: m.step = Step::unlock; break;
        case Step::unlock:
            if (original != m.id) { throw std::logic_error("the lock was not this writer's"); }
            fill_record(memory.record(i), i, ++m.written);
            m.step = m.written < o.iters ? Step::lock : Step::finished;
            break;
        case Step::version_before: m.step = Step::record; break;
        case Step::record: m.step = Step::version_after; break;
        case Step::version_after: {
            const std::uint64_t before = *memory.word(i, 1).value;
            if (before != *memory.word(i, 2).value || before % 2 != 0) {
                ++tally.torn;  // a writer was inside: the record may be mixed, read it again
            } else {
                ++tally.accepted;
                const std::byte* record = memory.record(i);
                if (std::any_of(record, record + kRecordBytes,
                                [&](std::byte b) { return b != record[0]; })) {
                    ++tally.mixed;
                }
            }
            // Once the writers are done, a reader's last read is one it accepted.
            m.step = writers_done && before == *memory.word(i, 2).value && before % 2 == 0
                         ? Step::finished
                         : Step::version_before;
            break;
        }
        case Step::finished: break;
    }
}
//! [seqlock_done]

//! [cas]
/// The seqlock run. Every connection goes at its own pace: each step is posted as soon as the
/// one before it completed, and the device interleaves the connections' requests at the
/// target. With readers, a writer rests kWriterRest for each writer between two records, so that
/// the record stands still most of the time, as a read-mostly record does; readers read until
/// the writers are done.
int run_cas(std::vector<Link>& links, SharedCompletionQueue& cq, const LocalMemory& memory,
            const Options& o) {
    const auto c = static_cast<std::uint32_t>(links.size());
    const std::uint32_t readers = o.readers > 0 ? o.readers : c - 1;  // one writer
    std::vector<SeqlockMember> members(c);
    std::vector<Clock::time_point> posted_at(c);
    const auto post = [&](std::uint32_t i) {
        posted_at[i] = Clock::now();
        post_step(links[i], members[i], memory, i);
    };
    for (std::uint32_t i = 0; i < c; ++i) {
        members[i].writer = i < c - readers;
        members[i].step = members[i].writer ? Step::lock : Step::version_before;
        members[i].id = std::uint64_t{links[i].connection->qp_num()} + 1;
        fill_record(memory.record(i), i, 0);
    }
    std::vector<std::optional<Clock::time_point>> resting(c);  // a writer's next post, if later
    for (std::uint32_t i = 0; i < c; ++i) { post(i); }
    SeqlockTally tally;
    std::uint32_t writers_left = c - readers, active = c, in_flight = c;
    const auto start = Clock::now();
    while (active > 0) {
        for (std::uint32_t i = 0; i < c; ++i) {
            if (resting[i] && Clock::now() >= *resting[i]) {
                resting[i].reset();
                post(i);
                ++in_flight;
            }
        }
        if (in_flight == 0) {
            throw_if_stopped();
            continue;  // every writer rests, and there is no reader
        }
        in_flight -= reap(cq, 1, o, [&](const ibv_wc& wc) {
            const auto i = static_cast<std::uint32_t>(wc.wr_id);
            SeqlockMember& m = members[i];
            if (m.step == Step::lock || m.step == Step::unlock) {
                tally.cas_samples.push_back(
                    std::chrono::duration<double, std::micro>(Clock::now() - posted_at[i]).count());
            }
            const bool record_done = m.step == Step::unlock;
            on_step_done(m, memory, i, writers_left == 0, tally, o);
            if (m.step != Step::finished && record_done) {
                resting[i] = Clock::now() + (readers > 0 ? kWriterRest * (c - readers) : kNoRest);
                return;
            }
            if (m.step != Step::finished) {
                post(i);
                ++in_flight;
                return;
            }
            --active;
            writers_left -= m.writer ? 1 : 0;
        });
    }
    const std::chrono::duration<double> elapsed = Clock::now() - start;
    print_figures("cas", tally.cas_samples, tally.cas_samples.size(), elapsed.count());
    std::printf("client: cas: %u writer(s) x %u records, %u reader(s): %" PRIu64
                " reads accepted, %" PRIu64 " torn and retried, %" PRIu64
                " mixed records accepted; %" PRIu64 " lock attempts found it held\n",
                c - readers, o.iters, readers, tally.accepted, tally.torn, tally.mixed,
                tally.lock_busy);
    return tally.mixed == 0 ? kExitOk : kExitRdma;
}
//! [cas]

/// Sends a window command and takes the server's answer, which must start with \p tag.
void exchange(const Link& link, const char (&command)[4], std::span<char> answer,
              const char (&tag)[4], const Options& o) {
    const std::chrono::seconds timeout(o.timeout_seconds);
    send_all(link.server, std::span(command, 4), timeout, "a window command");
    const std::size_t got = receive_all(link.server, answer, timeout, "the window's answer");
    if (got < answer.size() || !std::equal(tag, tag + 4, answer.begin())) {
        throw TutorialError(kExitPeer,
                            "the server answered " + printable_bytes(command) + " with " +
                                printable_bytes(answer.first(got)),
                            "the server's output says why it ended the session");
    }
}

WindowGrant ask_for_window(const Link& link, const Options& o) {
    std::array<char, kWindowReplySize> reply{};
    exchange(link, kBindCommand, reply, kWindowReply, o);
    return decode_window_reply(reply);
}

/// One WRITE of 64 bytes at \p to; the completion's status, whatever it is.
ibv_wc_status write_once(const Link& link, SharedCompletionQueue& cq, const LocalMemory& memory,
                         RemoteWord to, const Options& o) {
    post_write(link.qp(), memory.record(0), 64, memory.lkey(), to, 0);
    std::array<ibv_wc, 1> batch{};
    const auto deadline = Clock::now() + std::chrono::seconds(o.timeout_seconds);
    while (cq.poll(batch) == 0) {
        throw_if_stopped();
        if (Clock::now() > deadline) {
            throw TutorialError(kExitTimeout, "no completion within --timeout");
        }
    }
    return batch[0].status;
}

//! [window]
/// The window's life, seen from the client: the server lends a window over this client's page;
/// a WRITE through it lands; the server invalidates it; the next WRITE is refused, and that error
/// moves both QPs to ERR. A new connection gets a new window; a WRITE past its end but inside
/// the server's MR shows whether the device checks the window's range.
int run_window(const Device& device, SharedCompletionQueue& cq, const LocalMemory& memory,
               const Options& o) {
    Link link = open_link(device, cq, o);
    WindowGrant w = ask_for_window(link, o);
    std::printf("client: window: %" PRIu64 " bytes at 0x%" PRIx64 ", rkey 0x%08x\n", w.length,
                w.addr, w.rkey);
    const ibv_wc_status first = write_once(link, cq, memory, {w.addr, w.rkey}, o);
    if (first != IBV_WC_SUCCESS) {
        throw TutorialError(kExitRdma, std::string("the WRITE through the window failed: ") +
                                           wc_status_name(first));
    }
    std::printf("client: window: WRITE through it: IBV_WC_SUCCESS\n");
    std::array<char, 4> gone{};
    exchange(link, kInvalidateCommand, gone, kGoneReply, o);
    const ibv_wc_status after = write_once(link, cq, memory, {w.addr, w.rkey}, o);
    std::printf(
        "client: window: WRITE after the server invalidated it: %s%s\n", wc_status_name(after),
        after == IBV_WC_REM_ACCESS_ERR ? "; both QPs are in ERR now: connecting again" : "");
    if (after != IBV_WC_REM_ACCESS_ERR) { return kExitRdma; }
    link = open_link(device, cq, o);  // the old QP is destroyed here, in ERR
    w = ask_for_window(link, o);
    std::printf("client: window: a new one, rkey 0x%08x\n", w.rkey);
    const ibv_wc_status outside = write_once(link, cq, memory, {w.addr + w.length, w.rkey}, o);
    std::printf(
        "client: window: WRITE just past its end, inside the server's MR: %s%s\n",
        wc_status_name(outside),
        outside == IBV_WC_SUCCESS ? " (the device checked the MR's range, not the window's)" : "");
    return outside == IBV_WC_SUCCESS || outside == IBV_WC_REM_ACCESS_ERR ? kExitOk : kExitRdma;
}
//! [window]

}  // namespace

int run_client(const Options& o) {
    install_stop_handlers();  // tcp.hpp's: SIGINT and SIGTERM set g_stop_signal
    const Device device(device_config(o));
    if (o.op != Op::read_write && o.op != Op::window) {
        if (std::string refusal = atomic_cap_refusal(device.name(), device.attr().atomic_cap);
            !refusal.empty()) {
            throw TutorialError(kExitRdma, refusal, "ibv_devinfo -v shows atomic_cap");
        }
    }
    if (o.op == Op::fetch_add) {
        try {
            require_aligned(o.offset);  // refused here, before anything is posted
        } catch (const std::invalid_argument& e) {
            throw TutorialError(kExitUsage, std::string("--offset: ") + e.what());
        }
    }
    SharedCompletionQueue cq(device, o.connections * static_cast<std::uint32_t>(o.tx_depth));
    const LocalMemory memory(device, o.connections);
    if (o.op == Op::window) { return run_window(device, cq, memory, o); }
    std::vector<Link> links;
    for (std::uint32_t i = 0; i < o.connections; ++i) {
        links.push_back(open_link(device, cq, o));
        const Connection& c = *links.back().connection;
        if (i == 0 || o.verbose) {
            std::printf("%s\n", gid_choice_line(c.local_port()).c_str());
            print_address("local", c.local_info());
            print_address("remote", *c.remote_info());
        }
    }
    try {
        switch (o.op) {
            case Op::read_write: run_read_write(links, cq, memory, o); return kExitOk;
            case Op::fetch_add: return run_fetch_add(links, cq, memory, o);
            case Op::cas: return run_cas(links, cq, memory, o);
            case Op::window: break;
        }
    } catch (const TutorialError& e) {
        // A server that stopped destroyed its QPs: ours retried, then failed. Its TCP close names
        // the cause.
        if (e.exit_code() == kExitRdma &&
            std::any_of(links.begin(), links.end(),
                        [](const Link& l) { return peer_closed(l.server); })) {
            throw TutorialError(
                kExitPeer,
                std::string("the server closed the connection during the run (") + e.what() + ")",
                "it stopped, or ended this client's session: its own output says why");
        }
        throw;
    }
    return kExitOk;
}

}  // namespace tutorial
