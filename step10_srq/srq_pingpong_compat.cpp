// Step 10: --srq-pingpong-compat, one ibv_srq_pingpong client (rdma-core) on the shared CQ and SRQ.
#include <sys/socket.h>

#include <memory>
#include <vector>

#include "connection_table.hpp"
#include "pingpong.hpp"
#include "stats.hpp"

namespace tutorial {

namespace {

/// srq_pingpong.c's MAX_QP: each side always sends this many entries, unused ones as address 0.
constexpr std::size_t kTableEntries = 256;

/// The client's QPs: the entries before the first unused one. A malformed entry is a peer error.
std::vector<PeerInfo> parse_table(std::span<const char> table) {
    const WireMessage unused = format_wire_message(QpEndpointInfo{});
    std::vector<PeerInfo> qps;
    for (std::size_t i = 0; i < kTableEntries; ++i) {
        const auto entry = table.subspan(i * kWireMessageSize, kWireMessageSize);
        if (std::equal(entry.begin(), entry.end(), unused.begin())) { continue; }
        std::string error = "a QP after an unused entry";
        const auto info = qps.size() == i ? parse_wire_message(entry, error) : std::nullopt;
        if (!info) {
            throw TutorialError(kExitPeer, "ibv_srq_pingpong's table, entry " + std::to_string(i) +
                                               ": " + error + "; received " +
                                               printable_bytes(entry));
        }
        static_cast<QpEndpointInfo&>(qps.emplace_back()) = *info;
    }
    if (qps.empty()) { throw TutorialError(kExitPeer, "ibv_srq_pingpong's table has no QP"); }
    return qps;
}

void receive_exactly(const Socket& peer, std::span<char> bytes, const Options& o,
                     const char* what) {
    const std::size_t got = receive_all(peer, bytes, std::chrono::seconds(o.timeout_seconds), what);
    if (got < bytes.size()) {
        throw TutorialError(kExitPeer, "the client closed the connection after " +
                                           std::to_string(got) + " of " +
                                           std::to_string(bytes.size()) + " bytes of " + what);
    }
}

Socket accept_one_client(const Options& o) {
    const Socket listener = listen_on(o.bind_address, o.tcp_port);
    std::printf("server: waiting for one ibv_srq_pingpong client on TCP port %d\n", o.tcp_port);
    while (!wait_for(listener.get(), POLLIN, Clock::now() + std::chrono::hours(1))) {}  // or SIGINT
    Socket peer(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (peer.get() < 0) { throw std::system_error(errno, std::generic_category(), "accept4"); }
    // A refused client must see a reset: its read loop takes an end of stream for 0 more bytes.
    const linger reset{1, 0};
    ::setsockopt(peer.get(), SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    return peer;
}

/// srq_pingpong.c's loop: a QP answers once its message and its last send are both in; -n
/// counts the messages of every QP together.
void ping_pong(const Options& o, SharedCompletionQueue& cq, SharedReceiveQueue& srq,
               const std::vector<std::unique_ptr<Connection>>& qps, const ConnectionTable& owners) {
    constexpr unsigned kRecv = 1, kSend = 2;
    std::vector<unsigned> pending(qps.size(), kRecv);
    std::uint32_t received = 0, sent = 0;
    auto on_wc = [&](const ibv_wc& wc) {
        const bool send = (wc.wr_id & kSendTag) != 0;
        if (wc.status != IBV_WC_SUCCESS) { throw WorkCompletionError(wc, !send); }
        if (!send) { srq.give_back(wc.wr_id); }
        if (!send && wc.byte_len != o.size) {
            throw TutorialError(kExitPeer, "a message of " + std::to_string(wc.byte_len) +
                                               " bytes: both sides must use the same -s");
        }
        ++(send ? sent : received);
        const std::uint64_t qp = owners.find(wc.qp_num).connection;  // all live for the run
        pending.at(qp) &= ~(send ? kSend : kRecv);
        if (pending[qp] == 0 && sent < o.iters) {
            qps[qp]->post_send(kSendTag, o.size, true);
            pending[qp] = kRecv | kSend;
        }
    };
    std::array<ibv_wc, 16> storage{};
    const std::span<ibv_wc> batch(storage);
    auto last_progress = Clock::now();
    while (received < o.iters || sent < o.iters) {
        pollfd channel{cq.channel_fd(), POLLIN, 0};
        const bool woken = poll_unless_stopped(channel, std::chrono::milliseconds(o.safety_ms)) > 0;
        if ((woken ? service_channel(cq, cq.events(), batch, on_wc)
                   : safety_net_poll(cq, cq.events(), batch, on_wc)) > 0) {
            last_progress = Clock::now();
        } else if (Clock::now() - last_progress > std::chrono::seconds(o.timeout_seconds)) {
            throw TutorialError(
                kExitTimeout,
                "no completion after " + std::to_string(received) + " of " +
                    std::to_string(o.iters) + " messages",
                "srq_pingpong's table cannot carry -n: both sides must use the same -n");
        }
        (void)srq.post_free_slots();
    }
}

}  // namespace

int run_srq_pingpong_server(const Options& o) {
    install_stop_handlers();
    const Device device(device_config(o));
    SharedReceiveQueue srq(device, static_cast<std::uint32_t>(o.rx_depth), o.size);
    // Each QP has one send outstanding at most, as in srq_pingpong.c.
    SharedCompletionQueue cq(device, static_cast<std::uint32_t>(o.rx_depth + kTableEntries));
    cq.request_notify();  // armed before the first receive is posted
    (void)srq.post_free_slots();
    const Socket client = accept_one_client(o);
    std::array<char, kTableEntries * kWireMessageSize> table{};
    receive_exactly(client, table, o, "ibv_srq_pingpong's address table");
    std::vector<PeerInfo> remote = parse_table(table);
    if (remote.size() > static_cast<std::size_t>(o.rx_depth)) {
        const std::string n = std::to_string(remote.size());
        throw TutorialError(kExitPeer, "the client's " + n + " QPs can have " + n +
                                           " messages in flight, over the " +
                                           std::to_string(o.rx_depth) + " receives of -r");
    }
    // Every QP connected before the reply: the client sends as soon as it has read it.
    std::vector<std::unique_ptr<Connection>> qps;
    ConnectionTable owners;  // qp_num -> index in qps
    for (std::size_t i = 0; i < kTableEntries; ++i) {
        WireMessage entry = format_wire_message(QpEndpointInfo{});
        if (i < remote.size()) {
            qps.push_back(
                std::make_unique<Connection>(device, cq, srq, 1, o.size, *mtu_from_bytes(o.mtu)));
            qps[i]->use_local_address(local_address_bytes(client));  // step03's rule
            remote[i].mtu = qps[i]->path_mtu();  // not on the wire: both sides are given -m
            qps[i]->connect(remote[i]);
            (void)owners.add(qps[i]->qp_num(), i);
            entry = format_wire_message(qps[i]->local_info());
        }
        std::copy(entry.begin(), entry.end(), table.begin() + i * kWireMessageSize);
    }
    send_all(client, table, std::chrono::seconds(o.timeout_seconds), "the address table");
    std::array<char, sizeof kDoneMessage> done{};
    receive_exactly(client, done, o, "\"done\"");
    if (!std::equal(done.begin(), done.end(), kDoneMessage)) {
        throw TutorialError(kExitPeer, "expected \"done\", got " + printable_bytes(done));
    }
    std::printf("server: %zu QPs on one shared CQ of %u entries and SRQ of %u receives\n",
                qps.size(), cq.capacity(), srq.ring().depth());
    const auto start = Clock::now();
    ping_pong(o, cq, srq, qps, owners);
    const std::chrono::duration<double, std::micro> usec = Clock::now() - start;
    std::printf("%s", rc_pingpong_summary(o.size, o.iters, usec.count()).c_str());
    return kExitOk;
}

}  // namespace tutorial
