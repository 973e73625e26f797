// Step 12: the server. One UD QP, one receive queue and one CQ answer every client: a client is
// known by the address and QP number in the completion of its message, never by a connection.
#pragma once

#include "address_handles.hpp"
#include "errors.hpp"
#include "pingpong.hpp"
#include "resources.hpp"

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>

namespace tutorial {

struct ServerCounts {
    long long answered = 0;
    long long finished = 0;  // clients that sent their last message
    long long refused = 0;   // messages from one address too many for the cache
};

struct ClientRecord {
    long long messages = 0;
    long long repeats = 0;  // a number seen again: the client resent it
    std::uint32_t last = UINT32_MAX;
};

//! [server_answer]
// A message arrived in a slot: answer it from the same slot, to the QP that sent it (wc.src_qp)
// at the address that its completion and GRH give, with the same number. The slot's receive is
// posted again once that send has completed.
inline void answer(const Resources& resources, ibv_ah* ah, const ibv_wc& wc, std::uint32_t qkey) {
    const std::optional<std::uint32_t> imm =
        (wc.wc_flags & IBV_WC_WITH_IMM) != 0 ? std::optional(ntohl(wc.imm_data)) : std::nullopt;
    send_datagram(resources, slot_of(wc), wc.byte_len - kGrhBytes, ah, wc.src_qp, qkey, imm);
}
//! [server_answer]

// One line when a client's first message comes, one when its last does.
inline void note_client(std::map<std::pair<ibv_ah*, std::uint32_t>, ClientRecord>& clients,
                        ibv_ah* ah, const ibv_wc& wc, const std::byte* slot, ServerCounts& counts) {
    const std::uint32_t imm = ntohl(wc.imm_data);
    const auto key = std::make_pair(ah, wc.src_qp);
    auto found = clients.find(key);
    if (found == clients.end()) {
        if ((imm & kLastBit) != 0 && (imm & ~kLastBit) != 0) { return; }  // a resent goodbye
        std::printf("client QPN 0x%06x: first message; GRH: %s\n", wc.src_qp,
                    grh_text(wc, slot).c_str());
        found = clients.emplace(key, ClientRecord{}).first;
    }
    ClientRecord& record = found->second;
    ++record.messages;
    if (imm == record.last) { ++record.repeats; }
    record.last = imm;
    if ((imm & kLastBit) != 0) {
        std::printf(
            "client QPN 0x%06x: last message; %lld messages answered, %lld of them "
            "repeats (its ping or our answer was lost)\n",
            wc.src_qp, record.messages, record.repeats);
        std::fflush(stdout);
        clients.erase(found);
        ++counts.finished;
    }
}

//! [server_loop]
// Answers every message until `clients` clients have sent their last (0: until Ctrl-C).
inline void run_server(const Resources& resources, AddressCache& addresses, std::uint32_t qkey,
                       long long clients, ServerCounts& counts) {
    std::map<std::pair<ibv_ah*, std::uint32_t>, ClientRecord> records;
    long long sends_pending = 0;
    while (clients == 0 || counts.finished < clients || sends_pending > 0) {
        auto wc = poll_until(resources, Clock::now() + std::chrono::hours(24));
        if (!wc) { continue; }
        if (is_send(*wc)) {  // the answer is out: the slot may take a message again
            --sends_pending;
            post_receive(resources, slot_of(*wc));
            continue;
        }
        std::byte* slot = resources.slot(slot_of(*wc));
        ibv_ah* ah = addresses.for_sender(*wc, slot);
        if (ah == nullptr) {
            ++counts.refused;
            post_receive(resources, slot_of(*wc));
            continue;
        }
        answer(resources, ah, *wc, qkey);
        ++sends_pending;
        ++counts.answered;
        if ((wc->wc_flags & IBV_WC_WITH_IMM) != 0) { note_client(records, ah, *wc, slot, counts); }
    }
}
//! [server_loop]

}  // namespace tutorial
