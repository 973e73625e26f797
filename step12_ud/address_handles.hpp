// Step 12: address handles. One per destination address, not per peer, kept in a cache; the
// server makes its own from the completions of what it received.
#pragma once

#include "errors.hpp"
#include "gid.hpp"
#include "local_port.hpp"
#include "verbs_raii.hpp"

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <system_error>
#include <utility>

namespace tutorial {

//! [peer_address]
// The address vector of a peer we know by its GID (RoCE, or InfiniBand with a GRH) or its LID:
// the same fields an RC QP takes at RTR, here given to an address handle instead.
[[nodiscard]] inline ibv_ah_attr peer_address(const LocalPort& port, int ib_port,
                                              const GidBytes& gid, std::uint16_t lid) {
    ibv_ah_attr attr{};
    attr.dlid = lid;
    attr.sl = port.service_level;
    attr.port_num = static_cast<std::uint8_t>(ib_port);
    if (port.attr.link_layer == IBV_LINK_LAYER_ETHERNET || !is_zero_gid(gid)) {
        attr.is_global = 1;
        attr.grh.hop_limit = 1;
        std::memcpy(attr.grh.dgid.raw, gid.data(), gid.size());
        attr.grh.sgid_index = static_cast<std::uint8_t>(port.gid_index);
        attr.grh.traffic_class = port.traffic_class;
    }
    return attr;
}
//! [peer_address]

//! [grh_layout]
// The 40 bytes' layout, as libibverbs decides it: a GRH (or IPv6 header) starts with version 6,
// else byte 20 starts an IPv4 header. Bytes 0-19 are undefined before an IPv4 header, so a 6 there
// loses to a 20-byte IPv4 header at byte 20 whose checksum holds.
[[nodiscard]] inline bool ipv4_at_20(const std::byte* grh) {
    const auto byte = [&](std::size_t i) { return std::to_integer<std::uint32_t>(grh[i]); };
    if (byte(0) >> 4 != 6) { return byte(20) >> 4 == 4; }
    if (byte(20) != 0x45) { return false; }
    std::uint32_t sum = 0;  // the header's 16-bit words, its checksum included, add up to 0xffff
    for (std::size_t i = 20; i < 40; i += 2) { sum += byte(i) << 8 | byte(i + 1); }
    while (sum > 0xffff) { sum = (sum & 0xffff) + (sum >> 16); }
    return sum == 0xffff;
}
//! [grh_layout]

//! [address_cache]
// Address handles by sender address. A UD send names its destination (address handle, QP number,
// Q_Key) in every work request, and the QPs on one host share its address: the key is the address
// alone, a few bytes of the GRH. ibv_create_ah_from_wc, which searches the GID table (and on RoCE
// may wait for ARP), runs only for an address not seen before.
class AddressCache {
  public:
    AddressCache() = default;
    AddressCache(ibv_pd* pd, int ib_port) : pd_(pd), ib_port_(ib_port) {}

    // The handle for the sender of a received message; nullptr when the cache is full or no
    // handle can be made for that address (errno says why).
    [[nodiscard]] ibv_ah* for_sender(ibv_wc& wc, std::byte* grh) {
        const Key key = key_of(wc, grh);
        if (const auto found = handles_.find(key); found != handles_.end()) {
            return found->second.get();
        }
        if (handles_.size() >= kMaxAddresses) { return nullptr; }
        AddressHandle handle(ibv_create_ah_from_wc(pd_, &wc, reinterpret_cast<ibv_grh*>(grh),
                                                   static_cast<std::uint8_t>(ib_port_)));
        if (!handle) { return nullptr; }
        return handles_.emplace(key, std::move(handle)).first->second.get();
    }

    [[nodiscard]] std::size_t size() const { return handles_.size(); }

  private:
    static constexpr std::size_t kMaxAddresses = 1024;
    // The source and destination addresses: an IPv4 header's at bytes 32-39, a GRH's (or an IPv6
    // header's) at 8-39; and the source LID, the address without a GRH.
    using Key = std::pair<std::array<std::byte, 32>, std::uint16_t>;
    [[nodiscard]] static Key key_of(const ibv_wc& wc, const std::byte* grh) {
        Key key{{}, wc.slid};
        if ((wc.wc_flags & IBV_WC_GRH) == 0) { return key; }
        const bool ipv4 = ipv4_at_20(grh);
        std::memcpy(key.first.data(), grh + (ipv4 ? 32 : 8), ipv4 ? 8 : 32);
        return key;
    }
    ibv_pd* pd_ = nullptr;
    int ib_port_ = 0;
    std::map<Key, AddressHandle> handles_;
};
//! [address_cache]

//! [grh_text]
// What the device wrote into a receive's first 40 bytes: over IPv4 the IPv4 header, at byte 20
// (0-19 undefined); over IPv6 the IPv6 header, all 40; without IBV_WC_GRH, nothing defined.
[[nodiscard]] inline std::string grh_text(const ibv_wc& wc, const std::byte* grh) {
    if ((wc.wc_flags & IBV_WC_GRH) == 0) { return "no GRH: the 40 bytes are not defined"; }
    char from[INET6_ADDRSTRLEN] = "?", to[INET6_ADDRSTRLEN] = "?";
    if (ipv4_at_20(grh)) {
        inet_ntop(AF_INET, grh + 32, from, sizeof from);  // the IPv4 header's source, then dest
        inet_ntop(AF_INET, grh + 36, to, sizeof to);
        return std::string("bytes 20-39 hold an IPv4 header: ") + from + " -> " + to + ", TTL " +
               std::to_string(std::to_integer<int>(grh[28]));
    }
    inet_ntop(AF_INET6, grh + 8, from, sizeof from);
    inet_ntop(AF_INET6, grh + 24, to, sizeof to);
    return std::string("bytes 0-39 hold a GRH (an IPv6 header's layout): ") + from + " -> " + to;
}
//! [grh_text]

}  // namespace tutorial
