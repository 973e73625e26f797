// The builders the endpoint calls: open_and_check, the buffer, the RC QP, and the memlock hint.
#pragma once

#include "device.hpp"
#include "errors.hpp"
#include "verbs_raii.hpp"

#include <infiniband/verbs.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <system_error>

namespace tutorial {

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

struct OpenedDevice {
    std::string name;
    ibv_device_attr attr{};
};

[[nodiscard]] inline OpenedDevice open_and_check(DeviceList& device_list, Context& context,
                                                 const std::string& device_name, int ib_port) {
    int count = 0;
    device_list = get_device_list(count);
    const std::span<ibv_device* const> devices(device_list.get(), static_cast<std::size_t>(count));
    ibv_device* device = select_device(devices, device_name);
    OpenedDevice opened;
    opened.name = ibv_get_device_name(device);
    context.reset(ibv_open_device(device));
    if (!context) { throw std::system_error(errno, std::generic_category(), "ibv_open_device"); }
    if (const int rc = ibv_query_device(context.get(), &opened.attr); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_query_device");
    }
    check_port(opened.name, ib_port, opened.attr.phys_port_cnt);
    return opened;
}

// A zeroed, page-aligned buffer of size bytes, rounded up to whole pages.
[[nodiscard]] inline Buffer allocate_buffer(std::size_t size) {
    const long page_size = sysconf(_SC_PAGESIZE);
    const std::size_t page = page_size > 0 ? static_cast<std::size_t>(page_size) : 4096;
    const std::size_t allocated = (size + page - 1) / page * page;
    Buffer buffer(static_cast<std::byte*>(std::aligned_alloc(page, allocated)));
    if (!buffer) { throw std::system_error(ENOMEM, std::generic_category(), "aligned_alloc"); }
    std::memset(buffer.get(), 0, allocated);
    return buffer;
}

//! [create_rc_qp]
// An RC QP whose send and receive queues share one CQ, in RESET. Its receives come from the
// shared receive queue: with srq set, the device ignores max_recv_wr and max_recv_sge.
[[nodiscard]] inline QueuePair create_rc_qp(ibv_pd* pd, ibv_cq* cq, ibv_srq* srq,
                                            std::uint32_t tx_depth) {
    ibv_qp_init_attr init_attr{};
    init_attr.send_cq = cq;
    init_attr.recv_cq = cq;
    init_attr.srq = srq;
    init_attr.qp_type = IBV_QPT_RC;
    init_attr.cap.max_send_wr = tx_depth;
    init_attr.cap.max_send_sge = 1;
    init_attr.cap.max_inline_data = 64;
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
//! [create_rc_qp]

}  // namespace tutorial
