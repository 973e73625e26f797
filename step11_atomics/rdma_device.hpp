// Step 10: the device and PD that every connection shares, what a peer tells, a failed completion.
#pragma once

#include "cq_events.hpp"
#include "errors.hpp"
#include "gid.hpp"
#include "resources.hpp"
#include "verbs_raii.hpp"
#include "wire_format.hpp"

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace tutorial {

/// \brief A work completion that finished with a status other than IBV_WC_SUCCESS.
///
/// what() reads like `work completion failed: IBV_WC_RETRY_EXC_ERR (transport retry counter
/// exceeded) for wr_id 7, vendor_err 0x0`; hint() names the likely cause. The exit code is
/// kExitRdma.
class WorkCompletionError : public TutorialError {
  public:
    /// \p receive: whether \p wc was a receive's. In a failed completion the opcode is undefined
    /// (ibv_poll_cq(3)), so the caller tells from the wr_id; the hint depends on it.
    WorkCompletionError(const ibv_wc& wc, bool receive);
    [[nodiscard]] ibv_wc_status status() const noexcept { return wc_.status; }

  private:
    ibv_wc wc_;
};

/// \brief What one side tells the other to connect an RC QP and, in v3, to address its buffer
/// and to agree on the run: step04's QpEndpointInfo (LID, QPN, PSN, GID, all that
/// ibv_rc_pingpong's message carries), and what only handshake v3 carries.
struct PeerInfo : QpEndpointInfo {
    ibv_mtu mtu = IBV_MTU_1024;      ///< v3 only: the largest path MTU this side accepts
    std::uint64_t addr = 0;          ///< v3 only: the buffer's virtual address
    std::uint32_t rkey = 0;          ///< v3 only: the buffer's remote key (0 = no remote access)
    std::uint64_t length = 0;        ///< v3 only: the buffer's length in bytes
    std::uint32_t message_size = 0;  ///< v3 only: the program's -s (0: not said)
    std::uint32_t iterations = 0;    ///< v3 only: the program's -n (0: not said)
    /// v3 only: the RDMA READs (and atomics) this side can have outstanding, as the requester
    /// and as the responder; both sides use the smaller one. ibv_rc_pingpong's wire: 1.
    std::uint8_t read_depth = 1;
    bool operator==(const PeerInfo& other) const noexcept;
};

/// \brief Which device Device opens: the options -d, -i and -g.
struct DeviceConfig {
    std::string device_name;         ///< empty: the first device
    std::uint8_t port = 1;           ///< the port number, from 1
    int gid_index = -1;              ///< negative: choose_gid() over the port's table
    std::uint8_t service_level = 0;  ///< -l/--sl: the SL in each QP's address vector
    std::uint8_t traffic_class = 0;  ///< --tclass: the GRH's traffic class (DSCP and ECN bits)
    std::uint16_t pkey_index = 0;    ///< --pkey-index: the P_Key table entry at INIT
};

/// \brief An opened device that endpoints share: the device list, the context and one protection
/// domain, with the port's attributes and the GID chosen for it.
///
/// A server opens its device once; the shared CQ, the SRQ and every connection are made on it. It
/// is neither copied nor moved: each of them keeps a reference, and must be destroyed first.
class Device {
  public:
    /// \brief step04's opening: the device list, the named device, its context, a port that
    /// exists, its attributes and the GID (-g, or choose_gid()); then the PD.
    /// \throws TutorialError kExitNoDevice, kExitNoProvider, kExitNoSuchDevice (device, port or
    ///         GID); std::system_error naming the verb
    explicit Device(const DeviceConfig& config);
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    /// \brief The raw handles, and what the constructor queried, for the endpoints on it.
    [[nodiscard]] ibv_context* context() const noexcept { return context_.get(); }
    [[nodiscard]] ibv_pd* pd() const noexcept { return pd_.get(); }
    [[nodiscard]] const std::string& name() const noexcept { return opened_.name; }
    [[nodiscard]] std::uint8_t port() const noexcept { return port_; }
    [[nodiscard]] const ibv_device_attr& attr() const noexcept { return opened_.attr; }
    [[nodiscard]] const ibv_port_attr& port_attr() const noexcept { return local_.attr; }
    /// \brief The port's attributes and the GID index in use, as step04's query_local_port()
    /// found them.
    [[nodiscard]] const LocalPort& local_port() const noexcept { return local_; }
    /// \brief The port as a connection through this local address uses it: step03's choice of
    /// GID by the TCP connection's local address (-g still wins), with the fabric controls.
    [[nodiscard]] LocalPort local_port_for(
        const std::optional<std::array<std::uint8_t, 16>>& local_address) const;

  private:
    std::uint8_t port_ = 1;
    int gid_index_ = -1;   // -g, or negative
    OpenedDevice opened_;  // step04's open_and_check: the name and the device's attributes
    LocalPort local_;      // step04's query_local_port: the port's attributes and the GID
    // Declared parent-first: C++ destroys members in reverse, PD -> context -> device list.
    DeviceList device_list_;
    Context context_;
    ProtectionDomain pd_;
};

/// Completion events are acked this many at a time: ibv_ack_cq_events takes a mutex.
constexpr std::uint32_t kAckBatch = 16;

/// \brief The owner of a completion channel, in verbs_raii.hpp's shape (step06).
inline constexpr char kDestroyCompChannel[] = "ibv_destroy_comp_channel";
using CompletionChannel =
    std::unique_ptr<ibv_comp_channel,
                    VerbsDeleter<ibv_comp_channel, ibv_destroy_comp_channel, kDestroyCompChannel>>;

/// \brief Throws TutorialError(kExitUsage): "WHAT VALUE is over DEVICE's limit LIMIT = MAX".
[[noreturn]] void over_limit(const std::string& what, std::uint64_t value,
                             const std::string& device, const char* limit, std::uint64_t max);

}  // namespace tutorial
