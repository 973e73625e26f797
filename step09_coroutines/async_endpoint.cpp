// Step 09: AsyncEndpoint: routing completions to their awaiters, posting, and cancel().
#include "async_endpoint.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include "pingpong.hpp"

namespace tutorial {

namespace {

// A failed completion's opcode is undefined (ibv_poll_cq(3)): its wr_id says which side it was.
[[noreturn]] void throw_failure(const ibv_wc& wc) {
    throw WorkCompletionError(wc, classify_wr_id(wc.wr_id) == WrKind::receive);
}

}  // namespace

AsyncConfig async_config(const Options& o) {
    AsyncConfig c;
    c.message_size = o.size;
    c.rx_depth = static_cast<std::uint32_t>(o.rx_depth);
    c.tx_depth = static_cast<std::uint32_t>(o.tx_depth);
    c.messages = o.iters;
    return c;
}

EndpointConfig async_endpoint_config(const Options& o) {
    EndpointConfig c = endpoint_config(o, true);
    c.buffer_size = (static_cast<std::size_t>(o.rx_depth) + 1) * o.size;
    return c;
}

AsyncEndpoint::AsyncEndpoint(Reactor& reactor, RDMAEndpoint endpoint, const AsyncConfig& config)
    : reactor_(reactor),
      ep_(std::move(endpoint)),
      config_(config),
      signal_every_(std::max(1U, config.tx_depth / 2)),
      refill_batch_(std::max(1U, std::min(16U, config.rx_depth / 2))),
      completed_(config.rx_depth),
      receives_left_to_post_(config.messages) {
    reactor_.add_channel(*this);
}

AsyncEndpoint::~AsyncEndpoint() { close(); }

void AsyncEndpoint::close() noexcept {
    if (!reactor_.remove_channel(*this)) {  // out of the epoll set while the channel's fd is open
        return;
    }
    take_queued_events(ep_);  // pingpong.hpp
    ack_all_before_destroy(ep_, ep_.events());
}

std::span<std::byte> AsyncEndpoint::receive_slot(std::uint32_t slot) noexcept {
    return ep_.buffer().subspan(slot * config_.message_size, config_.message_size);
}

std::span<std::byte> AsyncEndpoint::send_slot() noexcept {
    return ep_.buffer().subspan(config_.rx_depth * config_.message_size, config_.message_size);
}

std::uint64_t AsyncEndpoint::on_channel_readable(ReadyQueue& ready) {
    // A failed completion, a flush too, is routed to its waiter like the others.
    return service_and_route(
        ep_, ep_.events(), std::span<ibv_wc>(batch_),
        [this](const ibv_wc& wc) { return route(wc); }, ready);
}

std::uint64_t AsyncEndpoint::safety_net(ReadyQueue& ready) {
    (void)on_channel_readable(ready);  // first, any event that is queued but not yet seen
    return safety_net_poll(ep_, ep_.events(), std::span<ibv_wc>(batch_), [&](const ibv_wc& wc) {
        if (const std::coroutine_handle<> waiter = route(wc)) { ready.push(waiter); }
    });
}

// ====================================================================== routing

//! [route]
std::coroutine_handle<> AsyncEndpoint::route(const ibv_wc& wc) {
    switch (classify_wr_id(wc.wr_id)) {
        case WrKind::receive: return route_receive(wc);
        case WrKind::send: return route_send(wc);
        case WrKind::drain_marker:  // cancel()'s marker: every send before it is done, CQE or not
            break;
    }
    marker_back_ = true;
    completed_sends_ = sent_;
    return {};
}

std::coroutine_handle<> AsyncEndpoint::route_receive(const ibv_wc& wc) {
    --posted_receives_;
    if (wc.status != IBV_WC_SUCCESS) {
        record_failure(wc);
        return take_failed_waiter(recv_waiter_);
    }
    completed_[(completed_head_ + completed_count_) % completed_.size()] = {
        static_cast<std::uint32_t>(wc.wr_id), wc.byte_len};
    ++completed_count_;
    return take(recv_waiter_);
}

// A signaled send completes every send before it (on an RC send queue, in order); when the QP
// fails, every send completes, unsignaled ones too, with a flush error.
std::coroutine_handle<> AsyncEndpoint::route_send(const ibv_wc& wc) {
    completed_sends_ = std::max(completed_sends_, (wc.wr_id & ~kSendTag) + 1);
    if (wc.status != IBV_WC_SUCCESS) {
        record_failure(wc);
        return take_failed_waiter(send_waiter_);
    }
    if (send_waiter_ != nullptr && completed_sends_ >= send_waiter_->wanted) {
        return take(send_waiter_);
    }
    return {};
}
//! [route]

// The rule: one waiter per slot. A waiter holds its slot from await_suspend() until its own
// await_resume(), queued or not. An awaiter that finds the slot held by another did not suspend
// (await_ready() said so): a second waiter would have replaced the first, which would never
// resume, or taken the completion routed to it.
void AsyncEndpoint::leave_slot(Pending*& slot, Pending& waiter, const char* what) {
    waiter.queued = false;
    if (slot == &waiter) {
        slot = nullptr;
    } else if (slot != nullptr) {
        throw std::logic_error(std::string("AsyncEndpoint: a second coroutine awaits ") + what +
                               " while one already does");
    }
}

// The waiter's handle, for the ReadyQueue, once: a waiter already queued stays in its slot and
// gives nothing.
std::coroutine_handle<> AsyncEndpoint::take(Pending* waiter) noexcept {
    if (waiter == nullptr || waiter->queued) { return {}; }
    waiter->queued = true;
    return waiter->handle;
}

// A failed completion resumes its own kind's waiter, or else any waiter of this endpoint not yet
// queued: the QP is in the error state, and every co_await on it throws the failure from now on.
std::coroutine_handle<> AsyncEndpoint::take_failed_waiter(Pending* own) noexcept {
    for (Pending* waiter : {own, recv_waiter_, send_waiter_}) {
        if (const std::coroutine_handle<> handle = take(waiter)) { return handle; }
    }
    return {};
}

void AsyncEndpoint::record_failure(const ibv_wc& wc) noexcept {
    if (!failure_) { failure_ = wc; }
}

void AsyncEndpoint::forget(Pending& waiter) noexcept {
    if (recv_waiter_ == &waiter) { recv_waiter_ = nullptr; }
    if (send_waiter_ == &waiter) { send_waiter_ = nullptr; }
    if (waiter.queued) { reactor_.ready().forget(waiter.handle); }
}

// ====================================================================== posting

void AsyncEndpoint::post_initial_receives() {
    ep_.request_notify();  // armed before the first post
    const auto initial = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(config_.rx_depth, receives_left_to_post_));
    for (std::uint32_t slot = 0; slot < initial; ++slot) {
        to_repost_[to_repost_count_++] = slot;
        if (to_repost_count_ == to_repost_.size() || slot + 1 == initial) { post_receive_batch(); }
    }
}

void AsyncEndpoint::repost(std::uint32_t slot) {
    if (failure_ || cancelled_ || receives_left_to_post_ <= to_repost_count_) {
        return;  // a QP in error flushes it at once; or every message to come has a receive
    }
    to_repost_[to_repost_count_++] = slot;
    if (to_repost_count_ >= refill_batch_ || to_repost_count_ == receives_left_to_post_) {
        post_receive_batch();
    }
}

// One ibv_post_recv for the slots given back, chained, from arrays on the stack.
void AsyncEndpoint::post_receive_batch() {
    std::array<ibv_sge, 16> sges{};
    std::array<ibv_recv_wr, 16> wrs{};
    const std::uint32_t count = to_repost_count_;
    for (std::uint32_t i = 0; i < count; ++i) {
        const std::span<std::byte> slot = receive_slot(to_repost_[i]);
        sges[i] = {reinterpret_cast<std::uintptr_t>(slot.data()),
                   static_cast<std::uint32_t>(slot.size()), ep_.mr()->lkey};
        wrs[i].wr_id = to_repost_[i];  // a receive's wr_id is its slot
        wrs[i].sg_list = &sges[i];
        wrs[i].num_sge = 1;
        wrs[i].next = i + 1 < count ? &wrs[i + 1] : nullptr;
    }
    to_repost_count_ = 0;
    ibv_recv_wr* bad = nullptr;
    if (const int rc = ibv_post_recv(ep_.qp(), wrs.data(), &bad); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_post_recv");
    }
    posted_receives_ += count;
    receives_left_to_post_ -= count;
}

void AsyncEndpoint::post_send_now(std::size_t length, bool last) {
    if (failure_) { throw_failure(*failure_); }
    // step06's selective signaling: a completion every max(1, tx_depth/2) sends, and the last.
    const bool signaled = (sent_ + 1) % signal_every_ == 0 || last;
    ep_.post_send(kSendTag | sent_, std::size_t{config_.rx_depth} * config_.message_size, length,
                  signaled);
    ++sent_;
}

Received AsyncEndpoint::RecvAwaiter::await_resume() {
    ep_.leave_slot(ep_.recv_waiter_, *this, "recv()");
    if (ep_.completed_count_ == 0) { throw_failure(*ep_.failure_); }
    const Completed c = ep_.completed_[ep_.completed_head_];
    ep_.completed_head_ = (ep_.completed_head_ + 1) % ep_.completed_.size();
    --ep_.completed_count_;
    const std::size_t length = std::min<std::size_t>(c.byte_len, ep_.config_.message_size);
    return Received{c.slot, ep_.receive_slot(c.slot).first(length)};
}

void AsyncEndpoint::SendsDoneAwaiter::await_resume() {
    ep_.leave_slot(ep_.send_waiter_, *this, "send() or sends_done()");
    if (ep_.failure_) { throw_failure(*ep_.failure_); }
}

// ====================================================================== cancel

//! [cancel]
/// Shutdown's first step for this connection: the QP to the error state, so that every
/// outstanding request completes with a flush error, and the marker that tells when they have.
void AsyncEndpoint::enter_error_state() {
    if (cancelled_) { return; }
    cancelled_ = true;
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    if (const int rc = ibv_modify_qp(ep_.qp(), &attr, IBV_QP_STATE); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_modify_qp ERR");
    }
    // Every posted receive completes, flushed, so those are counted. Sends are not: an unsignaled
    // send that finished before the QP failed makes no CQE at all. So, as the kernel's
    // ib_drain_sq() does, post a marker SEND (zero bytes, signaled) to the QP in the error state:
    // it completes at once, flushed, and a send queue completes in order, so once the marker is
    // back every earlier send has completed. (A full send queue takes no marker: then count.)
    ibv_send_wr marker{};
    marker.wr_id = kDrainSendWrId;
    marker.opcode = IBV_WR_SEND;
    marker.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    drain_marker_ = ibv_post_send(ep_.qp(), &marker, &bad) == 0;  // ENOMEM: the queue is full
}

void AsyncEndpoint::cancel(std::chrono::milliseconds timeout) {
    enter_error_state();
    // Drain until everything is back, or the timeout, or nothing new for kFlushStall: this CQ
    // holds rx + tx, but a CQ in error (IBV_EVENT_CQ_ERR: an overflow, a device fault) loses the
    // rest, and waiting longer would not bring them.
    const auto start = Clock::now();
    auto last_progress = start;
    while (!drained() && Clock::now() - start < timeout &&
           Clock::now() - last_progress < kFlushStall) {
        const int n = ep_.poll(batch_);
        if (n > 0) { last_progress = Clock::now(); }
        for (int i = 0; i < n; ++i) {
            if (const std::coroutine_handle<> waiter = route(batch_[static_cast<std::size_t>(i)])) {
                reactor_.ready().push(waiter);
            }
        }
    }
    // The shutdown's step 4: every waiter left is queued with the flush error (they run in the
    // next resume phase).
    if (!failure_) {
        ibv_wc flush{};
        flush.status = IBV_WC_WR_FLUSH_ERR;
        flush.qp_num = ep_.qp()->qp_num;
        failure_ = flush;
    }
    for (Pending* waiter : {recv_waiter_, send_waiter_}) {
        if (const std::coroutine_handle<> handle = take(waiter)) { reactor_.ready().push(handle); }
    }
}
//! [cancel]

/// cancel()'s end: every receive flushed, and the send queue drained (the marker back, or,
/// without one, every send counted).
bool AsyncEndpoint::drained() const noexcept {
    const bool sends_done = drain_marker_ ? marker_back_ : sent_ == completed_sends_;
    return sends_done && posted_receives_ == 0;
}

}  // namespace tutorial
