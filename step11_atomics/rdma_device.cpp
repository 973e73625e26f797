// Step 10: the device that every connection shares, and the errors of its verbs.
#include "rdma_device.hpp"

#include "device.hpp"
#include "gid.hpp"
#include "qp_transitions.hpp"
#include "resources.hpp"

#include <fcntl.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace tutorial {

namespace {

// A completion's vendor_err, the device's own error code, in hex: "0x1f".
std::string vendor_err_text(std::uint32_t vendor_err) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%x", vendor_err);
    return text;
}

}  // namespace

// ====================================================================== errors

WorkCompletionError::WorkCompletionError(const ibv_wc& wc, bool receive)
    : TutorialError(kExitRdma,
                    std::string("work completion failed: ") + wc_status_name(wc.status) + " (" +
                        ibv_wc_status_str(wc.status) + ") for wr_id " + std::to_string(wc.wr_id) +
                        ", vendor_err " + vendor_err_text(wc.vendor_err),
                    wc_status_cause(wc.status, receive)),
      wc_(wc) {}

bool PeerInfo::operator==(const PeerInfo& other) const noexcept {
    return lid == other.lid && qpn == other.qpn && psn == other.psn && gid == other.gid &&
           mtu == other.mtu && addr == other.addr && rkey == other.rkey && length == other.length &&
           message_size == other.message_size && iterations == other.iterations &&
           read_depth == other.read_depth;
}

// ====================================================================== the device

[[noreturn]] void over_limit(const std::string& what, std::uint64_t value,
                             const std::string& device, const char* limit, std::uint64_t max) {
    throw TutorialError(kExitUsage,
                        what + " " + std::to_string(value) + " is over " + device + "'s limit " +
                            limit + " = " + std::to_string(max),
                        "ibv_devinfo -v shows the device's limits");
}

// step04's open_and_check (the device list, the named device, its context, a port that exists)
// and query_local_port (the GID, -g or choose_gid); then the PD that every endpoint shares.
Device::Device(const DeviceConfig& config) : port_(config.port), gid_index_(config.gid_index) {
    opened_ = open_and_check(device_list_, context_, config.device_name, port_);
    local_ = query_local_port(context_.get(), port_, config.gid_index, opened_.attr.phys_port_cnt,
                              std::nullopt);
    check_pkey_index(local_.attr, port_, config.pkey_index);
    local_.service_level = config.service_level;
    local_.traffic_class = config.traffic_class;
    local_.pkey_index = config.pkey_index;
    pd_.reset(ibv_alloc_pd(context_.get()));
    if (!pd_) { throw std::system_error(errno, std::generic_category(), "ibv_alloc_pd"); }
}

LocalPort Device::local_port_for(
    const std::optional<std::array<std::uint8_t, 16>>& local_address) const {
    LocalPort port = query_local_port(context_.get(), port_, gid_index_, opened_.attr.phys_port_cnt,
                                      local_address);
    port.service_level = local_.service_level;
    port.traffic_class = local_.traffic_class;
    port.pkey_index = local_.pkey_index;
    return port;
}

}  // namespace tutorial
