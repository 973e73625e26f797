// Step 09: Task<T>, a lazy coroutine that resumes its awaiter by symmetric transfer.
#pragma once

#include <coroutine>
#include <exception>
#include <optional>
#include <utility>

namespace tutorial {

namespace detail {

//! [task_promise]
/// What every Task's promise shares: who awaits it (the continuation) and how it ended.
struct PromiseBase {
    std::coroutine_handle<> continuation;  // null for a top-level task the reactor started
    std::exception_ptr error;

    /// Lazy: the body runs only when the task is awaited or started.
    std::suspend_always initial_suspend() noexcept { return {}; }

    /// At the end, jump straight into the awaiting coroutine (symmetric transfer), or return to
    /// whoever resumed us when nobody awaits: the frame then stays until its owner destroys it.
    struct FinalAwaiter {
        bool await_ready() noexcept { return false; }
        template <typename Promise>
        std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> self) noexcept {
            const std::coroutine_handle<> next = self.promise().continuation;
            return next ? next : std::noop_coroutine();
        }
        void await_resume() noexcept {}
    };
    FinalAwaiter final_suspend() noexcept { return {}; }

    /// An exception that leaves the body is kept and rethrown to the awaiter.
    void unhandled_exception() noexcept { error = std::current_exception(); }
    void rethrow_error() const {
        if (error) { std::rethrow_exception(error); }
    }
};

/// get_return_object() gives the frame's handle, from which the caller's Task<T> is made.
template <typename T>
struct Promise : PromiseBase {
    std::optional<T> value;
    auto get_return_object() noexcept {
        return std::coroutine_handle<Promise>::from_promise(*this);
    }
    template <typename U>
    void return_value(U&& result) {
        value.emplace(std::forward<U>(result));
    }
    T take() {
        rethrow_error();
        return std::move(*value);
    }
};

template <>
struct Promise<void> : PromiseBase {
    auto get_return_object() noexcept {
        return std::coroutine_handle<Promise>::from_promise(*this);
    }
    void return_void() noexcept {}
    void take() const { rethrow_error(); }
};
//! [task_promise]

}  // namespace detail

//! [task]
/// A coroutine that returns T. It starts when awaited (`T x = co_await task;`) or when a reactor
/// starts its handle(), and the Task object owns its frame: moving it moves the ownership,
/// destroying it destroys the frame. Awaiting it resumes the task's body at once; when the body
/// ends, the awaiter continues by symmetric transfer (await_suspend returns a handle), so a chain
/// of awaited tasks does not nest resume() calls. The per-message path of this step awaits no
/// Task, only awaiters: a Task allocates a frame, once per connection.
template <typename T = void>
class [[nodiscard]] Task {
  public:
    using promise_type = detail::Promise<T>;
    using Handle = std::coroutine_handle<promise_type>;

    Task() = default;
    Task(Handle handle) noexcept : handle_(handle) {}  // what get_return_object() gives
    Task(Task&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
    /// Takes \p other's frame; this task's old frame goes with \p other.
    Task& operator=(Task other) noexcept {
        std::swap(handle_, other.handle_);
        return *this;
    }
    ~Task() { reset(); }

    /// The awaiter of `co_await task`: remember who awaits, then transfer to the task's body.
    struct Awaiter {
        Handle task;
        bool await_ready() const noexcept { return false; }  // lazy: not run yet (await it once)
        std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
            task.promise().continuation = awaiting;
            return task;  // symmetric transfer: resume the task without growing the stack
        }
        T await_resume() { return task.promise().take(); }
    };
    Awaiter operator co_await() const noexcept { return Awaiter{handle_}; }

    /// The frame's handle, for Reactor::spawn(); the Task still owns the frame.
    [[nodiscard]] std::coroutine_handle<> handle() const noexcept { return handle_; }
    /// True once the body has returned or thrown (the frame waits at its final suspend point).
    [[nodiscard]] bool done() const noexcept { return !handle_ || handle_.done(); }
    /// For a done top-level task: its value, or the exception that ended it, rethrown.
    T result() { return handle_.promise().take(); }
    /// Destroys the frame (and every local in it) now; the Task becomes empty.
    void reset() noexcept {
        if (handle_) { std::exchange(handle_, {}).destroy(); }
    }

  private:
    Handle handle_;
};
//! [task]

}  // namespace tutorial
