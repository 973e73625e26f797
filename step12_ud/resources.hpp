// The objects every RDMA program needs (buffer, PD, MR, CQ, QP), built and checked: here a UD QP
// and a buffer of receive slots.
#pragma once

#include "address_handles.hpp"
#include "device.hpp"
#include "enum_text.hpp"
#include "errors.hpp"
#include "gid.hpp"
#include "local_port.hpp"
#include "options.hpp"
#include "ud_qp.hpp"
#include "verbs_raii.hpp"

#include <infiniband/verbs.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <system_error>

namespace tutorial {

// Values the options allow but this device does not: exit code 2, naming the device limit.
inline void check_limits(const Options& options, const ibv_device_attr& attr,
                         const ibv_port_attr& port_attr, int ib_port) {
    //! [mtu_check]
    // A datagram is one packet: there is no path MTU to split it by. Check before posting: an
    // oversized UD send may complete with success and send nothing.
    const auto mtu = static_cast<std::size_t>(mtu_bytes(port_attr.active_mtu));
    const bool sends_size = !options.host.empty() || options.handshake;  // not a server's -s
    if (sends_size && options.size > mtu) {
        throw TutorialError(kExitUsage, "--size " + std::to_string(options.size) +
                                            " is over port " + std::to_string(ib_port) +
                                            "'s active MTU " + std::to_string(mtu) +
                                            ": a UD message must fit in one packet");
    }
    //! [mtu_check]
    if (options.rx_depth > attr.max_qp_wr) {
        throw TutorialError(kExitUsage, "--rx-depth " + std::to_string(options.rx_depth) +
                                            " is over the device limit max_qp_wr = " +
                                            std::to_string(attr.max_qp_wr));
    }
    // A slot holds a posted receive or a send in flight, never both: one CQ entry per slot.
    if (options.rx_depth + 1LL > attr.max_cqe) {
        throw TutorialError(kExitUsage, "--rx-depth + 1 is over the device's max_cqe, " +
                                            std::to_string(attr.max_cqe));
    }
}

// "64 KiB" or "unlimited": the soft RLIMIT_MEMLOCK that ibv_reg_mr pins against.
[[nodiscard]] inline std::string memlock_limit_text() {
    rlimit limit{};
    if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) { return "unknown"; }
    if (limit.rlim_cur == RLIM_INFINITY) { return "unlimited"; }
    return std::to_string(limit.rlim_cur / 1024) + " KiB";
}

// ibv_reg_mr pins the pages; without CAP_IPC_LOCK the pinned total must fit in ulimit -l,
// and the kernel answers ENOMEM when it does not.
[[noreturn]] inline void throw_reg_mr_error(int err, std::size_t bytes) {
    const std::string message = std::string("ibv_reg_mr: ") + std::strerror(err) +
                                " (registering " + std::to_string(bytes) + " bytes)";
    if (err == ENOMEM) {
        throw TutorialError(kExitRdma, message,
                            "the memlock limit (ulimit -l, now " + memlock_limit_text() +
                                ") is too low to pin " + std::to_string(bytes) +
                                " bytes: raise it with ulimit -l unlimited or in "
                                "/etc/security/limits.conf");
    }
    throw TutorialError(kExitRdma, message);
}

//! [slots]
// Every receive buffer starts with 40 bytes for the GRH (the packet's routing header, which a UD
// receive is given), then the message. One slot per receive, and one more to send from.
inline constexpr std::size_t kGrhBytes = 40;

// Declared parent-first: C++ destroys members in reverse, so teardown runs
// QP -> CQ -> address handles -> MR -> buffer -> PD -> context -> device list. An address handle
// outlives the QP: a send still queued names it (ibv_post_send(3)).
struct Resources {
    DeviceList device_list;
    Context context;
    ProtectionDomain pd;
    Buffer buffer;
    MemoryRegion mr;
    AddressHandle peer;      // a client's one destination
    AddressCache addresses;  // a server's, one per sender address
    CompletionQueue cq;
    QueuePair qp;
    std::size_t slot_size = 0;  // kGrhBytes + the largest message
    int slots = 0;              // rx_depth receive slots, then the send slot
    std::uint32_t psn = 0;      // our first send's PSN, set at RTS
    std::uint32_t max_inline = 0;

    [[nodiscard]] std::byte* slot(int index) const {
        return buffer.get() + static_cast<std::size_t>(index) * slot_size;
    }
};
//! [slots]

struct QueuePairCaps {
    ibv_qp_cap requested{};
    ibv_qp_cap granted{};
    ibv_qp_state state = IBV_QPS_RESET;
};

// What open_and_check found: the device's name and attributes, and the port's.
struct OpenedDevice {
    std::string name;
    ibv_device_attr attr{};
    ibv_port_attr port_attr{};
};

// Opens the chosen device (the first when the name is empty), checks that the port exists,
// and queries both.
[[nodiscard]] inline OpenedDevice open_and_check(DeviceList& device_list, Context& context,
                                                 const std::string& device_name, int ib_port) {
    int count = 0;
    device_list = get_device_list(count);
    const std::span<ibv_device* const> devices(device_list.get(), static_cast<std::size_t>(count));
    ibv_device* device = select_device(devices, device_name);
    OpenedDevice opened;
    opened.name = ibv_get_device_name(device);
    context = open_device(device);
    if (const int rc = ibv_query_device(context.get(), &opened.attr); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_query_device");
    }
    check_port(opened.name, ib_port, opened.attr.phys_port_cnt);
    // ibv_query_port returns the error number itself: use it, not errno.
    if (const int rc =
            ibv_query_port(context.get(), static_cast<std::uint8_t>(ib_port), &opened.port_attr);
        rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_query_port");
    }
    return opened;
}

[[nodiscard]] inline std::size_t page_size() {
    const long size = sysconf(_SC_PAGESIZE);
    return size > 0 ? static_cast<std::size_t>(size) : 4096;
}

// A zeroed, page-aligned buffer of size bytes, rounded up to whole pages.
[[nodiscard]] inline Buffer allocate_buffer(std::size_t size) {
    const std::size_t page = page_size();
    const std::size_t allocated = (size + page - 1) / page * page;
    Buffer buffer(static_cast<std::byte*>(std::aligned_alloc(page, allocated)));
    if (!buffer) { throw std::system_error(ENOMEM, std::generic_category(), "aligned_alloc"); }
    std::memset(buffer.get(), 0, allocated);
    return buffer;
}

//! [create_ud_qp]
// A UD QP whose send and receive queues share one CQ, in RESET; caps.requested is what it asks.
[[nodiscard]] inline QueuePair create_ud_qp(ibv_pd* pd, ibv_cq* cq, std::uint32_t depth,
                                            QueuePairCaps& caps) {
    ibv_qp_init_attr init_attr{};
    init_attr.send_cq = cq;
    init_attr.recv_cq = cq;
    init_attr.qp_type = IBV_QPT_UD;
    init_attr.cap.max_send_wr = depth;  // a server answers each receive once: as many sends
    init_attr.cap.max_recv_wr = depth;
    init_attr.cap.max_send_sge = 1;
    init_attr.cap.max_recv_sge = 1;
    init_attr.cap.max_inline_data = 64;
    caps.requested = init_attr.cap;
    QueuePair qp(ibv_create_qp(pd, &init_attr));
    if (!qp && errno == EINVAL) {
        // A device may allow less inline data than asked, or none: ask again for none (the
        // granted caps, printed, show it; sends then go from the registered buffer).
        init_attr.cap.max_inline_data = 0;
        qp.reset(ibv_create_qp(pd, &init_attr));
    }
    if (!qp) { throw std::system_error(errno, std::generic_category(), "ibv_create_qp"); }
    return qp;
}
//! [create_ud_qp]

// What the device granted (it may give more than was asked), and the QP's state.
inline void query_queue_pair(ibv_qp* qp, QueuePairCaps& caps) {
    ibv_qp_attr queried{};
    ibv_qp_init_attr queried_init{};
    if (const int rc = ibv_query_qp(qp, &queried, IBV_QP_STATE | IBV_QP_CAP, &queried_init);
        rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_query_qp");
    }
    caps.granted = queried.cap;
    caps.state = queried.qp_state;
}

// Creates the objects in dependency order, and moves the QP to RTS: a UD QP needs no peer for
// that. If one fails, the ones made so far are destroyed by Resources' members on the way out.
[[nodiscard]] inline QueuePairCaps build_resources(Resources& resources, const Options& options,
                                                   std::size_t largest_message) {
    resources.pd.reset(ibv_alloc_pd(resources.context.get()));
    if (!resources.pd) { throw std::system_error(errno, std::generic_category(), "ibv_alloc_pd"); }
    resources.slot_size = kGrhBytes + largest_message;
    resources.slots = options.rx_depth + 1;
    const std::size_t bytes = resources.slot_size * static_cast<std::size_t>(resources.slots);
    resources.addresses = AddressCache(resources.pd.get(), options.ib_port);
    resources.buffer = allocate_buffer(bytes);
    // Least privilege: only this process's own receives may write into the buffer.
    resources.mr.reset(
        ibv_reg_mr(resources.pd.get(), resources.buffer.get(), bytes, IBV_ACCESS_LOCAL_WRITE));
    if (!resources.mr) { throw_reg_mr_error(errno, bytes); }
    resources.cq.reset(
        ibv_create_cq(resources.context.get(), resources.slots, nullptr, nullptr, 0));
    if (!resources.cq) { throw std::system_error(errno, std::generic_category(), "ibv_create_cq"); }
    QueuePairCaps caps;
    resources.qp = create_ud_qp(resources.pd.get(), resources.cq.get(),
                                static_cast<std::uint32_t>(options.rx_depth), caps);
    resources.psn = random_psn();
    ud_qp_to_rts(resources.qp.get(), options.ib_port,
                 static_cast<std::uint16_t>(options.pkey_index), options.qkey, resources.psn);
    query_queue_pair(resources.qp.get(), caps);
    resources.max_inline = caps.granted.max_inline_data;
    return caps;
}

// run()'s report of the device: the port, a warning when it is not active, and the GID choice.
inline void print_opened_device(ibv_context* context, const OpenedDevice& opened, int ib_port) {
    std::printf("device:  %s port %d, %s, %s\n", opened.name.c_str(), ib_port,
                port_state_text(opened.port_attr.state),
                link_layer_text(opened.port_attr.link_layer));
    if (opened.port_attr.state != IBV_PORT_ACTIVE) {
        std::fflush(stdout);
        std::fprintf(stderr, "%s: %s\n", kProgram,
                     port_warning(opened.name, ib_port, opened.port_attr.state).c_str());
    }
    const auto choice = choose_gid(
        query_gid_table(context, ib_port, gid_table_size(context, opened.attr.phys_port_cnt)));
    std::printf("%s\n", recommendation_line(opened.name, ib_port, choice).c_str());
}

// run()'s report of what build_resources made. The device may round the CQ size up: cq->cqe is
// what we really got.
inline void print_resources(const Resources& resources, const Options& options) {
    std::printf("PD:      created\n");
    std::printf("buffer:  %d slots of %zu bytes (40 for the GRH, then the message)\n",
                resources.slots, resources.slot_size);
    std::printf("MR:      lkey 0x%08x, %zu bytes, access LOCAL_WRITE\n", resources.mr->lkey,
                resources.mr->length);
    std::printf("CQ:      %d entries (asked for %d)\n", resources.cq->cqe, resources.slots);
    print_transitions(*resources.qp, options.qkey);
}

inline void print_queue_pair(const ibv_qp& qp, const QueuePairCaps& caps) {
    std::printf("QP:      qp_num %u (0x%06x), type UD, state %s\n", qp.qp_num, qp.qp_num,
                qp_state_text(caps.state));
    std::printf("QP caps (ibv_query_qp):\n");
    const auto row = [](const char* name, std::uint32_t requested, std::uint32_t granted) {
        std::printf("    %-16s requested %u, granted %u\n", name, requested, granted);
    };
    row("max_send_wr", caps.requested.max_send_wr, caps.granted.max_send_wr);
    row("max_recv_wr", caps.requested.max_recv_wr, caps.granted.max_recv_wr);
    row("max_send_sge", caps.requested.max_send_sge, caps.granted.max_send_sge);
    row("max_recv_sge", caps.requested.max_recv_sge, caps.granted.max_recv_sge);
    row("max_inline_data", caps.requested.max_inline_data, caps.granted.max_inline_data);
}

}  // namespace tutorial
