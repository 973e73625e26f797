// wc_failures: one RC connection between two hosts, broken on purpose in one way (--fault), and
// every work completion that each side then gets, for the page "Failures on the wire".
//
//   wc_failures [-d DEV] [-p PORT]                      the responder: waits for the requester
//   wc_failures [-d DEV] [-p PORT] -f FAULT HOST        the requester: connects, posts, reports
//
// The requester names the fault; the responder learns it in the handshake and plays its part.
// peer-gone: kill the responder (kill -9) once it says "ready", and once its QP is gone (rdma
// resource show qp), send the requester SIGUSR1: then it posts.
// Both print each completion (wr_id, status, milliseconds after the first post) and their QP's
// state at the end. Exit codes: 0 the run ended as reported, 1 a verb failed, 2 usage, 6 the
// peer broke the handshake, 7 a wait timed out.
#include <arpa/inet.h>
#include <fcntl.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Failure : std::runtime_error {
    int exit_code;
    Failure(int code, const std::string& what) : std::runtime_error(what), exit_code(code) {}
};

// ---------------------------------------------------------------- the faults

enum class Fault {
    none,              // a SEND and a WRITE that succeed: the baseline
    peer_gone,         // the responder is killed before the SEND (the requester then waits for
                       // SIGUSR1: its QP is gone)
    wrong_gid,         // the requester addresses an IP address that no host has
    no_recv,           // the responder posts no receive; rnr_retry 3
    no_recv_forever,   // the same with rnr_retry 7, and the receive posted 1 s late
    wrong_rkey,        // a WRITE with an rkey the responder never issued
    no_remote_access,  // a WRITE into an MR registered without IBV_ACCESS_REMOTE_WRITE
    wrong_lkey,        // a SEND whose lkey belongs to a deregistered MR
    short_recv,        // a SEND longer than the receive buffer
    mtu_send,          // the responder's path MTU is 256, the requester's 1024: a SEND
    mtu_write,         // the same, with a WRITE
};
constexpr std::array<const char*, 11> kFaultNames = {
    "none",       "peer-gone",        "wrong-gid",  "no-recv",    "no-recv-forever",
    "wrong-rkey", "no-remote-access", "wrong-lkey", "short-recv", "mtu-send",
    "mtu-write"};

std::optional<Fault> fault_named(const std::string& name) {
    for (std::size_t i = 0; i < kFaultNames.size(); ++i) {
        if (name == kFaultNames[i]) { return static_cast<Fault>(i); }
    }
    return std::nullopt;
}
const char* name_of(Fault fault) { return kFaultNames.at(static_cast<std::size_t>(fault)); }
bool writes(Fault f) {
    return f == Fault::wrong_rkey || f == Fault::no_remote_access || f == Fault::mtu_write;
}

// ---------------------------------------------------------------- owners

void report(int rc, const char* verb) noexcept {
    const int err = rc > 0 ? rc : errno;
    if (rc != 0) { std::fprintf(stderr, "destroy failed: %s: %s\n", verb, std::strerror(err)); }
}
struct Deleter {
    void operator()(ibv_context* c) const noexcept {
        report(ibv_close_device(c), "ibv_close_device");
    }
    void operator()(ibv_pd* pd) const noexcept { report(ibv_dealloc_pd(pd), "ibv_dealloc_pd"); }
    void operator()(ibv_mr* mr) const noexcept { report(ibv_dereg_mr(mr), "ibv_dereg_mr"); }
    void operator()(ibv_cq* cq) const noexcept { report(ibv_destroy_cq(cq), "ibv_destroy_cq"); }
    void operator()(ibv_qp* qp) const noexcept { report(ibv_destroy_qp(qp), "ibv_destroy_qp"); }
};
template <typename T>
using Owner = std::unique_ptr<T, Deleter>;

void check(int rc, const char* verb) {
    if (rc != 0) { throw std::system_error(rc, std::generic_category(), verb); }
}
template <typename T>
Owner<T> created(T* object, const char* verb) {
    if (object == nullptr) { throw std::system_error(errno, std::generic_category(), verb); }
    return Owner<T>(object);
}

struct Fd {
    int fd = -1;
    explicit Fd(int f) : fd(f) {}
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    ~Fd() {
        if (fd >= 0) { close(fd); }
    }
};

// ---------------------------------------------------------------- options

struct Options {
    std::string device;
    std::string host;  // empty: the responder
    std::string port = "18515";
    Fault fault = Fault::none;
    std::uint32_t size = 1024;
    int timeout_seconds = 10;
};

[[noreturn]] void usage(int code) {
    std::fprintf(code == 0 ? stdout : stderr,
                 "usage: wc_failures [-d DEV] [-p PORT] [--timeout S]             the responder\n"
                 "       wc_failures [-d DEV] [-p PORT] [--timeout S] -f FAULT HOST the requester\n"
                 "faults: none peer-gone wrong-gid no-recv no-recv-forever wrong-rkey\n"
                 "        no-remote-access wrong-lkey short-recv mtu-send mtu-write\n"
                 "exit status: 0 ok, 1 RDMA error, 2 usage, 6 peer or protocol error, 7 timeout\n");
    std::exit(code);
}

Options parse(int argc, char** argv) {
    static const option longs[] = {
        {"ib-dev", required_argument, nullptr, 'd'}, {"port", required_argument, nullptr, 'p'},
        {"fault", required_argument, nullptr, 'f'},  {"timeout", required_argument, nullptr, 'T'},
        {"help", no_argument, nullptr, 'h'},         {nullptr, 0, nullptr, 0}};
    Options o;
    for (int c; (c = getopt_long(argc, argv, "d:p:f:h", longs, nullptr)) != -1;) {
        switch (c) {
            case 'd': o.device = optarg; break;
            case 'p': o.port = optarg; break;
            case 'f': {
                const auto f = fault_named(optarg);
                if (!f) {
                    std::fprintf(stderr, "wc_failures: no fault named '%s'\n", optarg);
                    usage(2);
                }
                o.fault = *f;
                break;
            }
            case 'T': o.timeout_seconds = std::atoi(optarg); break;
            case 'h': usage(0);
            default: usage(2);
        }
    }
    if (optind + 1 == argc) {
        o.host = argv[optind];
    } else if (optind != argc) {
        usage(2);
    }
    if (o.timeout_seconds <= 0) { usage(2); }
    return o;
}

// ---------------------------------------------------------------- the device

struct Device {
    Owner<ibv_context> context;
    ibv_port_attr port{};
    ibv_gid_entry gid{};
};

Device open_device(const std::string& name) {
    int count = 0;
    const std::unique_ptr<ibv_device*[], decltype(&ibv_free_device_list)> list(
        ibv_get_device_list(&count), ibv_free_device_list);
    ibv_device* chosen = nullptr;
    for (int i = 0; list && i < count; ++i) {
        if (name.empty() || name == ibv_get_device_name(list[i])) {
            chosen = list[i];
            break;
        }
    }
    if (chosen == nullptr) { throw std::runtime_error("no RDMA device " + name); }
    Device d{created(ibv_open_device(chosen), "ibv_open_device"), {}, {}};
    check(ibv_query_port(d.context.get(), 1, &d.port), "ibv_query_port");
    if (d.port.state != IBV_PORT_ACTIVE) { throw std::runtime_error("port 1 is not ACTIVE"); }
    // A RoCE v2 IPv4-mapped GID: the lab's wire is IPv4 (step01 chooses this way too).
    constexpr std::uint8_t kIpv4Mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    for (int index = 0; index < d.port.gid_tbl_len; ++index) {
        ibv_gid_entry entry{};
        if (ibv_query_gid_ex(d.context.get(), 1, index, &entry, 0) != 0) { continue; }
        if (d.port.link_layer != IBV_LINK_LAYER_ETHERNET ||
            (entry.gid_type == IBV_GID_TYPE_ROCE_V2 &&
             std::memcmp(entry.gid.raw, kIpv4Mapped, sizeof kIpv4Mapped) == 0)) {
            d.gid = entry;
            return d;
        }
    }
    throw std::runtime_error("port 1 has no RoCE v2 IPv4 GID");
}

// ---------------------------------------------------------------- the handshake

// One text line each way: the fault (requester only), QPN, PSN, LID, GID, and the MR's rkey and
// address (responder only; the requester sends zeros).
struct Peer {
    std::string fault;
    std::uint32_t qpn = 0, psn = 0, lid = 0, rkey = 0;
    std::uint64_t addr = 0;
    ibv_gid gid{};
};

std::string line_of(const Peer& p) {
    char gid[33];
    for (std::size_t i = 0; i < 16; ++i) { std::snprintf(gid + 2 * i, 3, "%02x", p.gid.raw[i]); }
    char line[160];
    std::snprintf(line, sizeof line, "%s %06x %06x %04x %s %08x %016" PRIx64 "\n", p.fault.c_str(),
                  p.qpn, p.psn, p.lid, gid, p.rkey, p.addr);
    return line;
}

Peer peer_of(const std::string& line) {
    char fault[24] = {}, gid[33] = {};
    Peer p;
    if (std::sscanf(line.c_str(), "%23s %6x %6x %4x %32[0-9a-f] %8x %16" SCNx64, fault, &p.qpn,
                    &p.psn, &p.lid, gid, &p.rkey, &p.addr) != 7 ||
        std::strlen(gid) != 32) {
        throw Failure(6, "the peer's handshake line is malformed: '" + line + "'");
    }
    p.fault = fault;
    for (std::size_t i = 0; i < 16; ++i) {
        p.gid.raw[i] =
            static_cast<std::uint8_t>(std::stoul(std::string(gid + 2 * i, 2), nullptr, 16));
    }
    return p;
}

void send_all(int fd, const std::string& text) {
    if (send(fd, text.data(), text.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(text.size())) {
        throw Failure(6, "the peer closed the TCP connection");
    }
}

// Reads one line; nullopt when the peer closed the connection first.
std::optional<std::string> read_line(int fd, Clock::time_point deadline) {
    std::string line;
    for (char c = 0; c != '\n';) {
        pollfd pfd{fd, POLLIN, 0};
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0 || poll(&pfd, 1, static_cast<int>(left.count())) == 0) {
            throw Failure(7, "timed out waiting for the peer");
        }
        const ssize_t n = recv(fd, &c, 1, 0);
        if (n == 0) { return std::nullopt; }
        if (n < 0) { throw Failure(6, std::string("recv: ") + std::strerror(errno)); }
        if (c != '\n') { line += c; }
        if (line.size() > 200) { throw Failure(6, "the peer's line is too long"); }
    }
    return line;
}

int tcp_connect(const Options& o, Clock::time_point deadline) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int rc = getaddrinfo(o.host.c_str(), o.port.c_str(), &hints, &found); rc != 0) {
        throw Failure(2, o.host + ": " + gai_strerror(rc));
    }
    const std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owner(found, freeaddrinfo);
    while (true) {  // the responder may not listen yet
        const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) { throw std::system_error(errno, std::generic_category(), "socket"); }
        if (connect(fd, found->ai_addr, found->ai_addrlen) == 0) { return fd; }
        close(fd);
        if (Clock::now() >= deadline) { throw Failure(7, "no responder at " + o.host); }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
}

int tcp_accept(const Options& o) {
    const Fd listener(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const int one = 1;
    setsockopt(listener.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(std::atoi(o.port.c_str())));
    if (bind(listener.fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        listen(listener.fd, 1) != 0) {
        throw std::system_error(errno, std::generic_category(), "bind/listen");
    }
    std::printf("responder: listening on TCP port %s\n", o.port.c_str());
    std::fflush(stdout);
    const int fd = accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) { throw std::system_error(errno, std::generic_category(), "accept"); }
    return fd;
}

// ---------------------------------------------------------------- the connection

constexpr std::uint8_t kAckTimeout = 14;   // 4.096 us * 2^14 = 67 ms
constexpr std::uint8_t kRetryCount = 3;    // 1 send + 3 retries, then IBV_WC_RETRY_EXC_ERR
constexpr std::uint8_t kMinRnrTimer = 12;  // 0.64 ms, as ibv_rc_pingpong

void to_rts(ibv_qp* qp, const Device& d, const Peer& remote, std::uint32_t my_psn, ibv_mtu mtu,
            std::uint8_t rnr_retry) {
    ibv_qp_attr init{};
    init.qp_state = IBV_QPS_INIT;
    init.port_num = 1;
    init.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    check(ibv_modify_qp(qp, &init,
                        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
          "ibv_modify_qp to INIT");
    ibv_qp_attr rtr{};
    rtr.qp_state = IBV_QPS_RTR;
    rtr.path_mtu = mtu;
    rtr.dest_qp_num = remote.qpn;
    rtr.rq_psn = remote.psn;
    rtr.min_rnr_timer = kMinRnrTimer;
    rtr.ah_attr.dlid = static_cast<std::uint16_t>(remote.lid);
    rtr.ah_attr.port_num = 1;
    if (d.port.link_layer == IBV_LINK_LAYER_ETHERNET) {
        rtr.ah_attr.is_global = 1;
        rtr.ah_attr.grh.dgid = remote.gid;
        rtr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(d.gid.gid_index);
        rtr.ah_attr.grh.hop_limit = 64;
    }
    check(ibv_modify_qp(qp, &rtr,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
          "ibv_modify_qp to RTR");
    ibv_qp_attr rts{};
    rts.qp_state = IBV_QPS_RTS;
    rts.sq_psn = my_psn;
    rts.timeout = kAckTimeout;
    rts.retry_cnt = kRetryCount;
    rts.rnr_retry = rnr_retry;
    check(ibv_modify_qp(qp, &rts,
                        IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                            IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC),
          "ibv_modify_qp to RTS");
}

const char* state_name(ibv_qp* qp) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    if (ibv_query_qp(qp, &attr, IBV_QP_STATE, &init) != 0) {
        return "unknown (ibv_query_qp failed)";
    }
    constexpr std::array<const char*, 7> names = {"RESET", "INIT", "RTR", "RTS",
                                                  "SQD",   "SQE",  "ERR"};
    return attr.qp_state < names.size() ? names.at(attr.qp_state) : "unknown";
}

// The asynchronous events the device raised for this process (QP fatal, access, request
// errors), read without waiting: the async fd is made non-blocking first.
void print_async_events(ibv_context* context, const char* side) {
    const int flags = fcntl(context->async_fd, F_GETFL);
    fcntl(context->async_fd, F_SETFL, flags | O_NONBLOCK);
    for (ibv_async_event event{}; ibv_get_async_event(context, &event) == 0;) {
        std::printf("%s: async event %s\n", side, ibv_event_type_str(event.event_type));
        ibv_ack_async_event(&event);
    }
}

// The work requests of a run, by wr_id.
enum WorkId : std::uint64_t { kFirst = 1, kSecond = 2, kRecv = 100, kRecv2 = 101 };
const char* work_name(std::uint64_t id, bool write_first) {
    switch (id) {
        case kFirst: return write_first ? "RDMA WRITE 1" : "SEND 1";
        case kSecond: return "SEND 2";
        case kRecv: return "RECV 100";
        case kRecv2: return "RECV 101";
        default: return "?";
    }
}

// The status's name in verbs.h, which ibv_wc_status_str() does not give.
const char* status_name(ibv_wc_status status) {
    constexpr std::array<const char*, 24> names = {"IBV_WC_SUCCESS",
                                                   "IBV_WC_LOC_LEN_ERR",
                                                   "IBV_WC_LOC_QP_OP_ERR",
                                                   "IBV_WC_LOC_EEC_OP_ERR",
                                                   "IBV_WC_LOC_PROT_ERR",
                                                   "IBV_WC_WR_FLUSH_ERR",
                                                   "IBV_WC_MW_BIND_ERR",
                                                   "IBV_WC_BAD_RESP_ERR",
                                                   "IBV_WC_LOC_ACCESS_ERR",
                                                   "IBV_WC_REM_INV_REQ_ERR",
                                                   "IBV_WC_REM_ACCESS_ERR",
                                                   "IBV_WC_REM_OP_ERR",
                                                   "IBV_WC_RETRY_EXC_ERR",
                                                   "IBV_WC_RNR_RETRY_EXC_ERR",
                                                   "IBV_WC_LOC_RDD_VIOL_ERR",
                                                   "IBV_WC_REM_INV_RD_REQ_ERR",
                                                   "IBV_WC_REM_ABORT_ERR",
                                                   "IBV_WC_INV_EECN_ERR",
                                                   "IBV_WC_INV_EEC_STATE_ERR",
                                                   "IBV_WC_FATAL_ERR",
                                                   "IBV_WC_RESP_TIMEOUT_ERR",
                                                   "IBV_WC_GENERAL_ERR",
                                                   "IBV_WC_TM_ERR",
                                                   "IBV_WC_TM_RNDV_INCOMPLETE"};
    const auto index = static_cast<std::size_t>(status);
    return index < names.size() ? names.at(index) : "an unknown status";
}

// Polls until `want` completions came or the deadline passed; prints each, in wr_id order (a
// flush completes the send and the receive queue in no set order). Returns how many.
int reap(ibv_cq* cq, const char* side, int want, Clock::time_point since,
         Clock::time_point deadline, bool write_first) {
    std::vector<std::pair<ibv_wc, double>> got;
    while (static_cast<int>(got.size()) < want && Clock::now() < deadline) {
        ibv_wc wc{};
        const int n = ibv_poll_cq(cq, 1, &wc);
        if (n < 0) { throw std::runtime_error("ibv_poll_cq failed"); }
        if (n == 0) {
            std::this_thread::sleep_for(std::chrono::microseconds(100));
            continue;
        }
        got.emplace_back(wc,
                         std::chrono::duration<double, std::milli>(Clock::now() - since).count());
    }
    std::sort(got.begin(), got.end(),
              [](const auto& a, const auto& b) { return a.first.wr_id < b.first.wr_id; });
    for (const auto& [wc, ms] : got) {
        std::printf("%s: %s: %s (%s), vendor_err 0x%x, %.1f ms after the first post\n", side,
                    work_name(wc.wr_id, write_first), status_name(wc.status),
                    ibv_wc_status_str(wc.status), wc.vendor_err, ms);
    }
    std::fflush(stdout);
    return static_cast<int>(got.size());
}

void post_recv(ibv_qp* qp, std::uint64_t id, void* at, std::uint32_t length, std::uint32_t lkey) {
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(at), length, lkey};
    ibv_recv_wr wr{};
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    check(ibv_post_recv(qp, &wr, &bad), "ibv_post_recv");
}

void post_send(ibv_qp* qp, std::uint64_t id, ibv_wr_opcode op, void* at, std::uint32_t length,
               std::uint32_t lkey, std::uint64_t remote_addr = 0, std::uint32_t rkey = 0) {
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(at), length, lkey};
    ibv_send_wr wr{};
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    check(ibv_post_send(qp, &wr, &bad), "ibv_post_send");
}

struct Resources {  // parent first: C++ destroys them in reverse
    Device device;
    Owner<ibv_pd> pd;
    std::vector<char> memory;  // [0, size): sent or written; [size, 3 size): two receives
    Owner<ibv_mr> mr;
    Owner<ibv_cq> cq;
    Owner<ibv_qp> qp;
};

Resources make(const Options& o, int access) {
    Resources r{
        open_device(o.device), {}, std::vector<char>(std::size_t{3} * o.size, 'x'), {}, {}, {}};
    r.pd = created(ibv_alloc_pd(r.device.context.get()), "ibv_alloc_pd");
    r.mr = created(ibv_reg_mr(r.pd.get(), r.memory.data(), r.memory.size(), access), "ibv_reg_mr");
    r.cq = created(ibv_create_cq(r.device.context.get(), 16, nullptr, nullptr, 0), "ibv_create_cq");
    ibv_qp_init_attr init{};
    init.send_cq = r.cq.get();
    init.recv_cq = r.cq.get();
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 4;
    init.cap.max_recv_wr = 4;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    r.qp = created(ibv_create_qp(r.pd.get(), &init), "ibv_create_qp");
    return r;
}

// ---------------------------------------------------------------- the two sides

void responder(const Options& o) {
    const Fd conn(tcp_accept(o));
    const auto deadline = Clock::now() + std::chrono::seconds(o.timeout_seconds);
    const auto line = read_line(conn.fd, deadline);
    if (!line) { throw Failure(6, "the requester closed the connection before its handshake"); }
    const Peer remote = peer_of(*line);
    const auto fault = fault_named(remote.fault);
    if (!fault) { throw Failure(6, "the requester names no known fault: " + remote.fault); }
    //! [responder_access]
    const int access = *fault == Fault::no_remote_access
                           ? IBV_ACCESS_LOCAL_WRITE
                           : IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    //! [responder_access]
    Resources r = make(o, access);
    const std::uint32_t size = o.size;
    Peer me{"-",
            r.qp->qp_num,
            0x200000,
            r.device.port.lid,
            r.mr->rkey,
            reinterpret_cast<std::uintptr_t>(r.memory.data()),
            r.device.gid.gid};
    send_all(conn.fd, line_of(me));
    //! [responder_mtu]
    const bool mtu_fault = *fault == Fault::mtu_send || *fault == Fault::mtu_write;
    to_rts(r.qp.get(), r.device, remote, me.psn, mtu_fault ? IBV_MTU_256 : r.device.port.active_mtu,
           7);
    //! [responder_mtu]
    std::printf("responder: fault %s: QP 0x%06x in RTS, path MTU %d\n", name_of(*fault),
                r.qp->qp_num, mtu_fault ? 256 : 128 << r.device.port.active_mtu);
    // The receives: two (SEND 1 and SEND 2), none, or short ones.
    const std::uint32_t length = *fault == Fault::short_recv ? size / 2 : size;
    int posted = 0;
    if (*fault != Fault::no_recv && *fault != Fault::no_recv_forever) {
        post_recv(r.qp.get(), kRecv, r.memory.data() + size, length, r.mr->lkey);
        post_recv(r.qp.get(), kRecv2, r.memory.data() + std::size_t{2} * size, length, r.mr->lkey);
        posted = 2;
        std::printf("responder: 2 receives of %u bytes posted\n", length);
    }
    std::printf("responder: ready\n");
    std::fflush(stdout);
    send_all(conn.fd, "ready\n");
    const auto start = Clock::now();
    if (*fault == Fault::no_recv_forever) {  // late: the requester meanwhile gets RNR NAKs
        std::this_thread::sleep_for(std::chrono::seconds(1));
        post_recv(r.qp.get(), kRecv, r.memory.data() + size, length, r.mr->lkey);
        post_recv(r.qp.get(), kRecv2, r.memory.data() + std::size_t{2} * size, length, r.mr->lkey);
        posted = 2;
        std::printf("responder: 2 receives posted, 1 s late\n");
    }
    // The requester says "done" when its own completions are in.
    if (read_line(conn.fd, deadline)) { /* done */
    }
    int got = reap(r.cq.get(), "responder", posted, start,
                   Clock::now() + std::chrono::milliseconds(200), false);
    // A QP in ERR flushes every receive still posted: wait for those.
    if (std::strcmp(state_name(r.qp.get()), "ERR") == 0) {
        got += reap(r.cq.get(), "responder", posted - got, start, deadline, false);
    }
    std::printf("responder: QP state %s; %d of %d receives completed\n", state_name(r.qp.get()),
                got, posted);
    print_async_events(r.device.context.get(), "responder");
}

void requester(const Options& o) {
    const auto deadline = Clock::now() + std::chrono::seconds(o.timeout_seconds);
    Resources r = make(o, IBV_ACCESS_LOCAL_WRITE);
    const Fd conn(tcp_connect(o, deadline));
    Peer me{name_of(o.fault), r.qp->qp_num, 0x100000, r.device.port.lid, 0, 0, r.device.gid.gid};
    send_all(conn.fd, line_of(me));
    const auto line = read_line(conn.fd, deadline);
    if (!line) { throw Failure(6, "the responder closed the connection before its handshake"); }
    Peer remote = peer_of(*line);
    //! [requester_address]
    if (o.fault == Fault::wrong_gid) {  // the same subnet, an address that no host has
        remote.gid.raw[15] = 0xfe;
    }
    const std::uint8_t rnr_retry = o.fault == Fault::no_recv_forever ? 7 : 3;
    to_rts(r.qp.get(), r.device, remote, me.psn, r.device.port.active_mtu, rnr_retry);
    //! [requester_address]
    std::printf("requester: fault %s: QP 0x%06x in RTS, rnr_retry %u, retry_cnt %u\n",
                name_of(o.fault), r.qp->qp_num, rnr_retry, kRetryCount);
    // The responder says "ready"; killed (peer-gone), it closes the connection instead.
    const auto ready = read_line(conn.fd, deadline);
    if (o.fault == Fault::peer_gone) {
        if (ready) { (void)read_line(conn.fd, deadline); }
        // The TCP connection can close before the dead process's QP is destroyed: whoever killed
        // the responder sends SIGUSR1 once it is (blocked in main, so it waits here).
        std::printf("requester: the responder closed its connection; waiting for SIGUSR1\n");
        std::fflush(stdout);
        sigset_t usr1;
        sigemptyset(&usr1);
        sigaddset(&usr1, SIGUSR1);
        const timespec wait{o.timeout_seconds, 0};
        if (sigtimedwait(&usr1, nullptr, &wait) != SIGUSR1) {
            throw Failure(7, "no SIGUSR1 to say that the responder's QP is gone");
        }
        std::printf("requester: the responder is gone\n");
    }
    const std::uint32_t size = o.size;
    char* data = r.memory.data();
    //! [requester_posts]
    std::uint32_t lkey = r.mr->lkey;
    if (o.fault == Fault::wrong_lkey) {  // an lkey that was valid once
        const Owner<ibv_mr> gone = created(
            ibv_reg_mr(r.pd.get(), data + size, size, IBV_ACCESS_LOCAL_WRITE), "ibv_reg_mr");
        lkey = gone->lkey;
    }
    post_recv(r.qp.get(), kRecv, data + size, size, r.mr->lkey);
    const auto start = Clock::now();
    const bool write_first = writes(o.fault) || o.fault == Fault::none;
    if (write_first) {
        const std::uint32_t rkey = o.fault == Fault::wrong_rkey ? remote.rkey + 1 : remote.rkey;
        post_send(r.qp.get(), kFirst, IBV_WR_RDMA_WRITE, data, size, lkey, remote.addr, rkey);
    } else {
        post_send(r.qp.get(), kFirst, IBV_WR_SEND, data, size, lkey);
    }
    std::printf("requester: posted RECV 100 and %s\n", work_name(kFirst, write_first));
    std::fflush(stdout);
    // One request at a time on the wire: SEND 2 is posted once the first has completed, on a QP
    // that may be in ERR by then.
    int got = reap(r.cq.get(), "requester", 1, start, deadline, write_first);
    if (got < 1) { throw Failure(7, "the first request did not complete before the timeout"); }
    post_send(r.qp.get(), kSecond, IBV_WR_SEND, data, size, r.mr->lkey);
    std::printf("requester: posted SEND 2, QP state %s\n", state_name(r.qp.get()));
    std::fflush(stdout);
    // A QP in ERR flushes SEND 2 and the posted receive too; in RTS the receive stays posted
    // (nothing is sent back).
    const bool error = std::strcmp(state_name(r.qp.get()), "ERR") == 0;
    got += reap(r.cq.get(), "requester", error ? 2 : 1, start, deadline, write_first);
    //! [requester_posts]
    if (got < (error ? 3 : 2)) { throw Failure(7, "SEND 2 did not complete before the timeout"); }
    std::printf("requester: QP state %s\n", state_name(r.qp.get()));
    print_async_events(r.device.context.get(), "requester");
    std::fflush(stdout);
    if (o.fault != Fault::peer_gone) { send_all(conn.fd, "done\n"); }
}

}  // namespace

int main(int argc, char** argv) try {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    sigset_t usr1;  // peer-gone's requester waits for it (sigtimedwait), so it must stay pending
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, nullptr);
    const Options o = parse(argc, argv);
    if (o.host.empty()) {
        responder(o);
    } else {
        requester(o);
    }
    return 0;
} catch (const Failure& error) {
    std::fprintf(stderr, "wc_failures: %s\n", error.what());
    return error.exit_code;
} catch (const std::exception& error) {
    std::fprintf(stderr, "wc_failures: %s\n", error.what());
    return 1;
}
