// Step 02: the objects every RDMA program needs (buffer, PD, MR, CQ, QP), owned by one RAII shape.
#include "device.hpp"
#include "enum_text.hpp"
#include "errors.hpp"
#include "gid.hpp"
#include "options.hpp"
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
#include <iostream>
#include <span>
#include <string>
#include <system_error>

namespace tutorial {

//! [resources]
// Declared parent-first: C++ destroys members in reverse, so teardown runs
// QP -> CQ -> MR -> buffer -> PD -> context -> device list, each child before its parent.
struct Resources {
    DeviceList device_list;
    Context context;
    ProtectionDomain pd;
    Buffer buffer;
    MemoryRegion mr;
    CompletionQueue cq;
    QueuePair qp;
};
//! [resources]

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

// The pieces of run(), defined below it.
[[nodiscard]] OpenedDevice open_and_check(DeviceList& device_list, Context& context,
                                          const std::string& device_name, int ib_port);
void print_opened_device(ibv_context* context, const OpenedDevice& opened, int ib_port);
void check_limits(const Options& options, const ibv_device_attr& attr);
[[nodiscard]] QueuePairCaps build_resources(Resources& resources, const Options& options);
void print_resources(const Resources& resources, const Options& options);
void print_queue_pair(const ibv_qp& qp, const QueuePairCaps& caps);

//! [run]
// The outline: open the device, create the objects parent-first, show the QP; RAII tears down.
void run(const Options& options) {
    trace_teardown = true;
    Resources resources;
    const OpenedDevice opened = open_and_check(resources.device_list, resources.context,
                                               options.device_name, options.ib_port);
    print_opened_device(resources.context.get(), opened, options.ib_port);
    check_limits(options, opened.attr);
    const QueuePairCaps caps = build_resources(resources, options);
    print_resources(resources, options);
    print_queue_pair(*resources.qp, caps);
    std::printf("tearing down in reverse order of creation:\n");
}  // resources goes out of scope here: the teardown lines come from its members' deleters
//! [run]

//! [limits]
// Values the options allow but this device does not: exit code 2, naming the device limit.
void check_limits(const Options& options, const ibv_device_attr& attr) {
    if (options.size > attr.max_mr_size) {
        throw TutorialError(kExitUsage, "--size " + std::to_string(options.size) +
                                            " is over the device limit max_mr_size = " +
                                            std::to_string(attr.max_mr_size));
    }
    if (options.rx_depth > attr.max_qp_wr) {
        throw TutorialError(kExitUsage, "--rx-depth " + std::to_string(options.rx_depth) +
                                            " is over the device limit max_qp_wr = " +
                                            std::to_string(attr.max_qp_wr));
    }
    if (options.tx_depth > attr.max_qp_wr) {
        throw TutorialError(kExitUsage, "--tx-depth " + std::to_string(options.tx_depth) +
                                            " is over the device limit max_qp_wr = " +
                                            std::to_string(attr.max_qp_wr));
    }
    // One CQ serves both queues, so it needs room for both depths.
    const long long cq_entries = static_cast<long long>(options.rx_depth) + options.tx_depth;
    if (cq_entries > attr.max_cqe) {
        throw TutorialError(
            kExitUsage,
            "--rx-depth " + std::to_string(options.rx_depth) + " + --tx-depth " +
                std::to_string(options.tx_depth) + " = " + std::to_string(cq_entries) +
                " CQ entries is over the device limit max_cqe = " + std::to_string(attr.max_cqe));
    }
}
//! [limits]

//! [open]
// Opens the chosen device (the first when the name is empty), checks that the port exists,
// and queries both.
[[nodiscard]] OpenedDevice open_and_check(DeviceList& device_list, Context& context,
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
//! [open]

//! [memlock]
// "64 KiB" or "unlimited": the soft RLIMIT_MEMLOCK that ibv_reg_mr pins against.
[[nodiscard]] std::string memlock_limit_text() {
    rlimit limit{};
    if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) { return "unknown"; }
    if (limit.rlim_cur == RLIM_INFINITY) { return "unlimited"; }
    return std::to_string(limit.rlim_cur / 1024) + " KiB";
}

// ibv_reg_mr pins the pages; without CAP_IPC_LOCK the pinned total must fit in ulimit -l,
// and the kernel answers ENOMEM when it does not.
[[noreturn]] void throw_reg_mr_error(int err, std::size_t bytes) {
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
//! [memlock]

//! [build]
[[nodiscard]] std::size_t page_size() {
    const long size = sysconf(_SC_PAGESIZE);
    return size > 0 ? static_cast<std::size_t>(size) : 4096;
}

// Creates the objects in dependency order, and moves the QP to INIT; if one fails, the ones made so
// far are destroyed by Resources' members on the way out.
[[nodiscard]] QueuePairCaps build_resources(Resources& resources, const Options& options) {
    resources.pd.reset(ibv_alloc_pd(resources.context.get()));
    if (!resources.pd) { throw std::system_error(errno, std::generic_category(), "ibv_alloc_pd"); }
    const std::size_t page = page_size();
    const std::size_t allocated = (options.size + page - 1) / page * page;
    resources.buffer.reset(static_cast<std::byte*>(std::aligned_alloc(page, allocated)));
    if (!resources.buffer) {
        throw std::system_error(ENOMEM, std::generic_category(), "aligned_alloc");
    }
    std::memset(resources.buffer.get(), 0, allocated);
    // Least privilege: only this process's own receives may write into the buffer.
    resources.mr.reset(ibv_reg_mr(resources.pd.get(), resources.buffer.get(), options.size,
                                  IBV_ACCESS_LOCAL_WRITE));
    if (!resources.mr) { throw_reg_mr_error(errno, options.size); }
    const int cq_entries = options.rx_depth + options.tx_depth;
    resources.cq.reset(ibv_create_cq(resources.context.get(), cq_entries, nullptr, nullptr, 0));
    if (!resources.cq) { throw std::system_error(errno, std::generic_category(), "ibv_create_cq"); }
    ibv_qp_init_attr init_attr{};
    init_attr.send_cq = resources.cq.get();
    init_attr.recv_cq = resources.cq.get();
    init_attr.qp_type = IBV_QPT_RC;
    init_attr.cap.max_send_wr = static_cast<std::uint32_t>(options.tx_depth);
    init_attr.cap.max_recv_wr = static_cast<std::uint32_t>(options.rx_depth);
    init_attr.cap.max_send_sge = 1;
    init_attr.cap.max_recv_sge = 1;
    init_attr.cap.max_inline_data = 64;
    QueuePairCaps caps;
    caps.requested = init_attr.cap;
    resources.qp.reset(ibv_create_qp(resources.pd.get(), &init_attr));
    if (!resources.qp) { throw std::system_error(errno, std::generic_category(), "ibv_create_qp"); }
    // RESET -> INIT: bind the QP to a port and P_Key; no remote access is allowed yet.
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = static_cast<std::uint8_t>(options.ib_port);
    attr.qp_access_flags = 0;
    if (const int rc =
            ibv_modify_qp(resources.qp.get(), &attr,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_modify_qp(INIT)");
    }
    // What the device granted (it may give more than was asked), and the QP's state.
    ibv_qp_attr queried{};
    ibv_qp_init_attr queried_init{};
    if (const int rc =
            ibv_query_qp(resources.qp.get(), &queried, IBV_QP_STATE | IBV_QP_CAP, &queried_init);
        rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_query_qp");
    }
    caps.granted = queried.cap;
    caps.state = queried.qp_state;
    return caps;
}
//! [build]

//! [report]
// run()'s report of the device: the port, a warning when it is not active, and the GID choice.
void print_opened_device(ibv_context* context, const OpenedDevice& opened, int ib_port) {
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
void print_resources(const Resources& resources, const Options& options) {
    std::printf("PD:      created\n");
    std::printf("buffer:  %zu bytes, page-aligned (page size %zu)\n", options.size, page_size());
    std::printf("MR:      lkey 0x%08x, rkey 0x%08x, %zu bytes, access LOCAL_WRITE\n",
                resources.mr->lkey, resources.mr->rkey, resources.mr->length);
    std::printf("CQ:      %d entries (asked for %d)\n", resources.cq->cqe,
                options.rx_depth + options.tx_depth);
}
//! [report]

//! [print_qp]
void print_queue_pair(const ibv_qp& qp, const QueuePairCaps& caps) {
    std::printf("QP:      qp_num %u (0x%06x), type RC, state %s\n", qp.qp_num, qp.qp_num,
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
//! [print_qp]

}  // namespace tutorial

#ifndef RDMA_TUTORIAL_UNIT_TEST  // the unit tests include this file and bring their own main
//! [main]
int main(int argc, char** argv) {
    using namespace tutorial;
    try {
        const Options options = parse_options(argc, argv);
        if (options.help) {
            std::cout << usage_text();
            return kExitOk;
        }
        run(options);
        return kExitOk;
    } catch (const UsageError& e) {
        std::cerr << kProgram << ": " << e.what() << '\n' << usage_text();
        return kExitUsage;
    } catch (const TutorialError& e) {
        std::cout.flush();
        std::cerr << kProgram << ": " << e.what() << '\n';
        if (!e.hint().empty()) { std::cerr << "hint: " << e.hint() << '\n'; }
        return e.exit_code();
    } catch (const std::system_error& e) {
        std::cout.flush();
        std::cerr << kProgram << ": " << e.what() << '\n';
        return kExitRdma;
    }
}
//! [main]
#endif
