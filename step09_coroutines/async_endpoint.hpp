// Step 09: awaitable RDMA operations over RDMAEndpoint: recv, send, and cancel.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "cq_events.hpp"
#include "options.hpp"
#include "rdma_endpoint.hpp"
#include "reactor.hpp"

namespace tutorial {

/// The shape of one connection's buffer and queues: -s, -r, -t, and -n.
///
/// The buffer holds [rx_depth receive slots of message_size bytes | one send slot]:
/// receive slot i at i * message_size, the send slot at rx_depth * message_size.
struct AsyncConfig {
    std::size_t message_size = 4096;  ///< -s: each receive slot and the send slot
    std::uint32_t rx_depth = 500;     ///< -r: receive slots, at most this many posted
    std::uint32_t tx_depth = 16;      ///< -t: sends outstanding at most
    std::uint64_t messages = 1000;    ///< -n: receives to post in all
};
/// -s, -r, -t and -n from the options; and pingpong.hpp's endpoint_config(), with a completion
/// channel and the buffer grown to the layout above.
[[nodiscard]] AsyncConfig async_config(const Options& o);
[[nodiscard]] EndpointConfig async_endpoint_config(const Options& o);

//! [wr_id]
/// What a completion's wr_id says (valid in a failed completion too, with the status, qp_num and
/// vendor_err: ibv_poll_cq(3)):
///   receive:   the slot index, 0 .. rx_depth-1 (top bit clear)
///   send:      kSendTag | the send's sequence number
inline constexpr std::uint64_t kSendTag = std::uint64_t{1} << 63;
/// cancel()'s marker send (see there), a wr_id no other send has.
inline constexpr std::uint64_t kDrainSendWrId = ~std::uint64_t{0};
/// cancel() stops draining when nothing more came for this long (a CQ in error).
inline constexpr std::chrono::milliseconds kFlushStall{100};
enum class WrKind : std::uint8_t { receive, send, drain_marker };
/// The one place that decodes a wr_id.
[[nodiscard]] inline WrKind classify_wr_id(std::uint64_t wr_id) noexcept {
    if (wr_id == kDrainSendWrId) {  // first: its send tag is set, but it is no numbered send
        return WrKind::drain_marker;
    }
    return (wr_id & kSendTag) != 0 ? WrKind::send : WrKind::receive;
}
//! [wr_id]

/// A completed receive: its slot (give it back with repost()) and the bytes that arrived.
struct Received {
    std::uint32_t slot = 0;
    std::span<std::byte> bytes;  ///< the slot's first byte_len bytes
};

/// One connection: an RDMAEndpoint (owned) whose completions the reactor routes to the
/// coroutines awaiting them. Every awaiter lives in the awaiting coroutine's frame: the
/// per-message path (recv, repost, send, routing, resume) allocates nothing. One coroutine at a
/// time awaits recv(), and one awaits send() or sends_done(): a second is a std::logic_error.
///
/// Errors: a failed completion (a flush too) is kept, the first one only, and resumes its
/// waiter; from then on every co_await on this endpoint throws WorkCompletionError with it
/// (receives that completed before it are still returned first).
class AsyncEndpoint final : public ChannelClient {
  public:
    /// Registers with \p reactor; \p endpoint must be made with async_endpoint_config().
    AsyncEndpoint(Reactor& reactor, RDMAEndpoint endpoint, const AsyncConfig& config);
    /// close(), then the RDMAEndpoint's own destructor (QP, CQ, channel, MR, buffer).
    ~AsyncEndpoint();

    [[nodiscard]] RDMAEndpoint& endpoint() noexcept { return ep_; }

    /// Arms the CQ first (a completion before the first ibv_req_notify_cq raises no event), then
    /// posts min(rx_depth, messages) receives, one per slot. Call before connecting, as step06.
    void post_initial_receives();

    /// `Received r = co_await ep.recv();`: the oldest completed receive, at once if one is in
    /// the ring of completed slots, or when one completes. \throws WorkCompletionError
    class RecvAwaiter;
    [[nodiscard]] RecvAwaiter recv() noexcept;
    /// Gives a slot back: re-posted in batches (up to 16 per ibv_post_recv), never more than the
    /// messages still to come. \throws std::system_error ("ibv_post_recv")
    void repost(std::uint32_t slot);

    /// The send slot: fill it, then `co_await ep.send(length)`.
    [[nodiscard]] std::span<std::byte> send_slot() noexcept;
    /// Posts a SEND of send_slot().first(length), signaled every max(1, tx_depth/2) sends and
    /// when \p last (step06's selective signaling). Suspends only while tx_depth sends are
    /// outstanding; a signaled completion resumes it. \throws WorkCompletionError,
    /// std::system_error ("ibv_post_send")
    class SendAwaiter;
    [[nodiscard]] SendAwaiter send(std::size_t length, bool last) noexcept;
    /// `co_await ep.sends_done()`: until every send posted has completed. The last send must have
    /// been posted with last = true (signaled), or this waits forever. \throws WorkCompletionError
    class SendsDoneAwaiter;
    [[nodiscard]] SendsDoneAwaiter sends_done() noexcept;

    /// Shutdown for this connection: the QP to IBV_QPS_ERR; then drain its CQ until every
    /// outstanding request has completed (posted receives, unsignaled sends: flushed, or
    /// completed before), at most \p timeout; then every waiter is queued on the ReadyQueue with
    /// the flush error (they run in the next resume phase). Call it outside the reactor's routing
    /// phase (from a coroutine, or between rounds). The flushes it drains are not counted in
    /// events(). \throws std::system_error ("ibv_modify_qp ERR", "ibv_poll_cq")
    void cancel(std::chrono::milliseconds timeout);
    /// cancel()'s first step alone: the QP to the error state (and the drain marker posted), so
    /// that a shutdown can fail every QP before it drains any. cancel() calls it if needed.
    /// \throws std::system_error ("ibv_modify_qp ERR")
    void enter_error_state();

    /// Before the verbs objects go: leave the reactor, take the events still queued, ack them all
    /// (ibv_destroy_cq waits for that). Idempotent; the destructor calls it.
    void close() noexcept;

    // ChannelClient: called by the reactor in its routing phase.
    [[nodiscard]] int channel_fd() const noexcept override { return ep_.channel_fd(); }
    std::uint64_t on_channel_readable(ReadyQueue& ready) override;
    std::uint64_t safety_net(ReadyQueue& ready) override;

    struct Pending {  // what an awaiter that suspended leaves with the endpoint
        Pending() = default;
        Pending(const Pending&) = delete;  // the endpoint holds its address: never copied
        Pending& operator=(const Pending&) = delete;
        std::coroutine_handle<> handle;
        std::uint64_t wanted = 0;  // send waiters: the completed_sends() that resumes them
        bool queued = false;       // on the ReadyQueue, not yet resumed (still in its slot)
    };

  private:
    [[nodiscard]] std::span<std::byte> receive_slot(std::uint32_t slot) noexcept;
    std::coroutine_handle<> route(const ibv_wc& wc);
    std::coroutine_handle<> route_receive(const ibv_wc& wc);
    std::coroutine_handle<> route_send(const ibv_wc& wc);
    void leave_slot(Pending*& slot, Pending& waiter, const char* what);
    std::coroutine_handle<> take(Pending* waiter) noexcept;
    std::coroutine_handle<> take_failed_waiter(Pending* own) noexcept;
    void record_failure(const ibv_wc& wc) noexcept;
    void post_send_now(std::size_t length, bool last);
    void post_receive_batch();
    void forget(Pending& waiter) noexcept;
    [[nodiscard]] bool drained() const noexcept;

    Reactor& reactor_;
    RDMAEndpoint ep_;
    AsyncConfig config_;
    std::uint32_t signal_every_;
    std::uint32_t refill_batch_;
    // The ring of completed receives: slot index and byte_len, capacity rx_depth (allocated once).
    struct Completed {
        std::uint32_t slot;
        std::uint32_t byte_len;
    };
    std::vector<Completed> completed_;
    std::size_t completed_head_ = 0, completed_count_ = 0;
    std::array<std::uint32_t, 16> to_repost_{};  // slots given back, posted in one chain
    std::uint32_t to_repost_count_ = 0;
    std::uint64_t receives_left_to_post_ = 0;  // messages - receives posted so far
    std::uint32_t posted_receives_ = 0;
    std::uint64_t sent_ = 0, completed_sends_ = 0;
    Pending* recv_waiter_ = nullptr;
    Pending* send_waiter_ = nullptr;
    std::optional<ibv_wc> failure_;
    bool cancelled_ = false;
    bool drain_marker_ = false;  // cancel()'s marker send was posted
    bool marker_back_ = false;   // ... and has completed
    std::array<ibv_wc, 16> batch_{};
};

//! [recv_awaiter_class]
class AsyncEndpoint::RecvAwaiter : private AsyncEndpoint::Pending {
  public:
    explicit RecvAwaiter(AsyncEndpoint& ep) noexcept : ep_(ep) {}
    ~RecvAwaiter() { ep_.forget(*this); }
    /// Also true when another coroutine waits: await_resume() then throws.
    [[nodiscard]] bool await_ready() const noexcept {
        return ep_.completed_count_ != 0 || ep_.failure_.has_value() || ep_.recv_waiter_;
    }
    void await_suspend(std::coroutine_handle<> handle) noexcept {
        this->handle = handle;
        ep_.recv_waiter_ = this;
    }
    Received await_resume();

  private:
    AsyncEndpoint& ep_;
};
//! [recv_awaiter_class]

//! [send_awaiter_class]
class AsyncEndpoint::SendAwaiter : private AsyncEndpoint::Pending {
  public:
    SendAwaiter(AsyncEndpoint& ep, std::size_t length, bool last) noexcept
        : ep_(ep), length_(length), last_(last) {}
    ~SendAwaiter() { ep_.forget(*this); }
    /// Room in the send queue: fewer than tx_depth sends outstanding (or another waiter).
    [[nodiscard]] bool await_ready() const noexcept {
        return ep_.sent_ - ep_.completed_sends_ < ep_.config_.tx_depth || ep_.failure_ ||
               ep_.send_waiter_;
    }
    void await_suspend(std::coroutine_handle<> handle) noexcept {
        this->handle = handle;
        wanted = ep_.sent_ - ep_.config_.tx_depth + 1;
        ep_.send_waiter_ = this;
    }
    void await_resume() {
        ep_.leave_slot(ep_.send_waiter_, *this, "send() or sends_done()");
        ep_.post_send_now(length_, last_);
    }

  private:
    AsyncEndpoint& ep_;
    std::size_t length_;
    bool last_;
};

class AsyncEndpoint::SendsDoneAwaiter : private AsyncEndpoint::Pending {
  public:
    explicit SendsDoneAwaiter(AsyncEndpoint& ep) noexcept : ep_(ep) {}
    ~SendsDoneAwaiter() { ep_.forget(*this); }
    [[nodiscard]] bool await_ready() const noexcept {
        return ep_.completed_sends_ == ep_.sent_ || ep_.failure_ || ep_.send_waiter_;
    }
    void await_suspend(std::coroutine_handle<> handle) noexcept {
        this->handle = handle;
        wanted = ep_.sent_;
        ep_.send_waiter_ = this;
    }
    void await_resume();

  private:
    AsyncEndpoint& ep_;
};
//! [send_awaiter_class]

inline AsyncEndpoint::RecvAwaiter AsyncEndpoint::recv() noexcept { return RecvAwaiter(*this); }
inline AsyncEndpoint::SendAwaiter AsyncEndpoint::send(std::size_t length, bool last) noexcept {
    return SendAwaiter(*this, length, last);
}
inline AsyncEndpoint::SendsDoneAwaiter AsyncEndpoint::sends_done() noexcept {
    return SendsDoneAwaiter(*this);
}

}  // namespace tutorial
