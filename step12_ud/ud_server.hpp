// Step 12: the server. One UD QP, one receive queue and one CQ answer every client: a client is
// known by the address and QP number in the completion of its message, never by a connection.
#pragma once

#include "address_handles.hpp"
#include "errors.hpp"
#include "pingpong.hpp"
#include "resources.hpp"
#include "wc_status.hpp"

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <utility>

namespace tutorial {

struct ServerCounts {
    long long answered = 0;
    long long finished = 0;  // clients that sent their last message
    long long refused = 0;   // messages from an address without a handle (the cache full)
    long long failed = 0;    // receives completed in error, the QP still working
};

// What the server remembers of a client, from its first message to its last.
struct ClientRecord {
    long long messages = 0;
    long long repeats = 0;  // a number seen again: our answer to it was lost or late
    std::uint32_t last = UINT32_MAX;
};
using ClientKey = std::pair<ibv_ah*, std::uint32_t>;  // address handle, QP number

// Clients remembered at once, and ended ones; the others are answered all the same, unnamed.
inline constexpr std::size_t kMaxRecords = 4096;
// Answering on after the last client's last message: that answer may be lost (TCP's TIME_WAIT).
inline constexpr std::chrono::seconds kLinger{1};

//! [server_answer]
// Answers a message from its own slot, with its number, to the QP that sent it (wc.src_qp) at
// the address its completion and GRH give. The slot is posted again once that send completes.
inline void answer(const Resources& resources, ibv_ah* ah, const ibv_wc& wc, std::uint32_t qkey) {
    const std::optional<std::uint32_t> imm =
        (wc.wc_flags & IBV_WC_WITH_IMM) != 0 ? std::optional(ntohl(wc.imm_data)) : std::nullopt;
    send_datagram(resources, slot_of(wc), message_length(wc), ah, wc.src_qp, qkey, imm);
}
//! [server_answer]

class ClientBook {
  public:
    // One line when a client's first message comes, one when its last does.
    void note(ibv_ah* ah, const ibv_wc& wc, const std::byte* slot, ServerCounts& counts) {
        const std::uint32_t imm = ntohl(wc.imm_data);
        const ClientKey key(ah, wc.src_qp);
        if (ended_.count(key) != 0) { return; }  // its last message again: answered, not counted
        auto found = records_.find(key);
        if (found == records_.end()) {
            if (records_.size() >= kMaxRecords) { return; }
            std::printf("client QPN 0x%06x: first message; GRH: %s\n", wc.src_qp,
                        grh_text(wc, slot).c_str());
            std::fflush(stdout);
            found = records_.emplace(key, ClientRecord{}).first;
        }
        ClientRecord& record = found->second;
        ++record.messages;
        if (imm == record.last) { ++record.repeats; }
        record.last = imm;
        if ((imm & kLastBit) == 0) { return; }
        std::printf(
            "client QPN 0x%06x: last message; %lld messages answered, %lld of them "
            "repeats (our answer was lost or late)\n",
            wc.src_qp, record.messages, record.repeats);
        std::fflush(stdout);
        records_.erase(found);
        if (ended_.size() >= kMaxRecords) { ended_.clear(); }
        ended_.insert(key);
        ++counts.finished;
    }

  private:
    std::map<ClientKey, ClientRecord> records_;
    std::set<ClientKey> ended_;
};

// A failed receive: on a working QP, dropped and posted again; once the QP is in error, the end.
inline void receive_failed(const Resources& resources, const ibv_wc& wc, ServerCounts& counts) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    if (const int rc = ibv_query_qp(resources.qp.get(), &attr, IBV_QP_STATE, &init); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_query_qp");
    }
    if (attr.qp_state == IBV_QPS_ERR) { throw_wc_error(wc, true); }
    ++counts.failed;
    post_receive(resources, slot_of(wc));
}

//! [server_loop]
// Answers every message until `clients` clients have sent their last (0: until Ctrl-C).
inline void run_server(Resources& resources, std::uint32_t qkey, long long clients,
                       ServerCounts& counts) {
    ClientBook book;
    long long sends_pending = 0;
    Clock::time_point stop_at = Clock::time_point::max();
    while (sends_pending > 0 || Clock::now() < stop_at) {
        std::optional<ibv_wc> wc =
            next_completion(resources, std::min(stop_at, Clock::now() + std::chrono::hours(1)));
        if (!wc) { continue; }
        if (is_send(*wc)) {  // the answer is out: the slot may take a message again
            if (wc->status != IBV_WC_SUCCESS) { throw_wc_error(*wc, false); }
            --sends_pending;
            post_receive(resources, slot_of(*wc));
            continue;
        }
        if (wc->status != IBV_WC_SUCCESS) {
            receive_failed(resources, *wc, counts);
            continue;
        }
        std::byte* slot = resources.slot(slot_of(*wc));
        ibv_ah* ah = resources.addresses.for_sender(*wc, slot);
        if (ah == nullptr) {  // the cache is full, or no route to that sender
            ++counts.refused;
            post_receive(resources, slot_of(*wc));
            continue;
        }
        answer(resources, ah, *wc, qkey);
        ++sends_pending;
        ++counts.answered;
        if ((wc->wc_flags & IBV_WC_WITH_IMM) != 0) { book.note(ah, *wc, slot, counts); }
        if (clients != 0 && counts.finished >= clients && stop_at == Clock::time_point::max()) {
            stop_at = Clock::now() + kLinger;
        }
    }
}
//! [server_loop]

}  // namespace tutorial
