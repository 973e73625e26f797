// Step 09 unit tests: Task<T>: lazy, values and exceptions, symmetric transfer, frame ownership.
#include <gtest/gtest.h>

#include <coroutine>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../task.hpp"

namespace {

using tutorial::Task;

// Counts how many of its kind are alive: a local in a frame tells when the frame is destroyed.
struct Tracked {
    static inline int alive = 0;
    Tracked() { ++alive; }
    Tracked(const Tracked&) = delete;
    Tracked& operator=(const Tracked&) = delete;
    ~Tracked() { --alive; }
};

// A resumable point that the test controls: a coroutine suspends on it until resume_waiter().
struct Gate {
    std::coroutine_handle<> waiter;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) noexcept { waiter = h; }
    void await_resume() const noexcept {}
    void open() { std::exchange(waiter, {}).resume(); }
};

Task<int> answer(std::vector<std::string>& log) {
    log.emplace_back("answer runs");
    co_return 42;
}

Task<void> caller(std::vector<std::string>& log, int& out) {
    log.emplace_back("caller runs");
    out = co_await answer(log);
    log.emplace_back("caller got the answer");
}

TEST(Task, IsLazyAndRunsWhenStarted) {
    std::vector<std::string> log;
    int out = 0;
    Task<void> task = caller(log, out);
    EXPECT_TRUE(log.empty()) << "a Task must not run before it is awaited or started";
    EXPECT_FALSE(task.done());
    task.handle().resume();  // what the reactor does with a started task
    EXPECT_TRUE(task.done());
    EXPECT_EQ(out, 42);
    EXPECT_EQ(log,
              (std::vector<std::string>{"caller runs", "answer runs", "caller got the answer"}));
    EXPECT_NO_THROW(task.result());
}

Task<int> fails() {
    throw std::runtime_error("inner failure");
    co_return 0;  // never reached; makes this a coroutine
}

Task<void> catches(std::string& caught) {
    try {
        (void)co_await fails();
    } catch (const std::runtime_error& e) { caught = e.what(); }
}

TEST(Task, AnExceptionReachesTheAwaiter) {
    std::string caught;
    Task<void> task = catches(caught);
    task.handle().resume();
    EXPECT_TRUE(task.done());
    EXPECT_EQ(caught, "inner failure");
}

TEST(Task, ResultRethrowsWhatEndedATopLevelTask) {
    Task<int> task = fails();
    task.handle().resume();
    ASSERT_TRUE(task.done());
    EXPECT_THROW((void)task.result(), std::runtime_error);
}

Task<std::unique_ptr<int>> move_only() { co_return std::make_unique<int>(7); }

TEST(Task, ReturnsAMoveOnlyValue) {
    Task<std::unique_ptr<int>> task = move_only();
    task.handle().resume();
    const std::unique_ptr<int> value = task.result();
    ASSERT_NE(value, nullptr);
    EXPECT_EQ(*value, 7);
}

Task<void> waits_at(Gate& gate, int& stage) {
    Tracked local;
    stage = 1;
    co_await gate;
    stage = 2;
}

Task<void> awaits_waiter(Gate& gate, int& stage, bool& after) {
    co_await waits_at(gate, stage);
    after = true;  // reached by symmetric transfer from the inner task's final suspend
}

TEST(Task, ResumesItsAwaiterWhenItEndsAfterASuspension) {
    Gate gate;
    int stage = 0;
    bool after = false;
    Task<void> task = awaits_waiter(gate, stage, after);
    task.handle().resume();
    EXPECT_EQ(stage, 1);
    EXPECT_FALSE(after);
    EXPECT_FALSE(task.done());
    gate.open();  // as the reactor resumes an awaiter's coroutine
    EXPECT_EQ(stage, 2);
    EXPECT_TRUE(after);
    EXPECT_TRUE(task.done());
    EXPECT_EQ(Tracked::alive, 0);
}

TEST(Task, DestroyingASuspendedTaskDestroysItsFrame) {
    Gate gate;
    int stage = 0;
    {
        Task<void> task = waits_at(gate, stage);
        task.handle().resume();
        EXPECT_EQ(Tracked::alive, 1);
    }
    EXPECT_EQ(Tracked::alive, 0) << "the frame's locals must be destroyed with the Task";
    EXPECT_EQ(stage, 1);
}

TEST(Task, DestroyingATaskThatNeverRanFreesItsFrame) {
    Gate gate;
    int stage = 0;
    { Task<void> task = waits_at(gate, stage); }
    EXPECT_EQ(stage, 0);
    EXPECT_EQ(Tracked::alive, 0);
}

TEST(Task, MovingTransfersOwnership) {
    Gate gate;
    int stage = 0;
    Task<void> a = waits_at(gate, stage);
    Task<void> b = std::move(a);
    EXPECT_TRUE(a.done()) << "a moved-from Task is empty";  // NOLINT(bugprone-use-after-move):
                                                            // checks the moved-from state
    EXPECT_FALSE(b.done());
    b.handle().resume();
    Task<void> c;
    c = std::move(b);
    EXPECT_EQ(Tracked::alive, 1);
    c.reset();
    EXPECT_EQ(Tracked::alive, 0);
}

Task<int> one() { co_return 1; }

Task<long> sum_of_ones(int count) {
    long sum = 0;
    for (int i = 0; i < count; ++i) { sum += co_await one(); }
    co_return sum;
}

// Tasks that complete without suspending, awaited in a loop: each await starts a frame and
// returns. (At -O0 GCC does not promise the tail call of symmetric transfer, which is why the
// per-message path awaits no Task; 10000 is within any stack. unit_task_stack.cpp runs a million
// on a small stack.)
TEST(Task, AwaitsManyTasksInALoop) {
    Task<long> task = sum_of_ones(10000);
    task.handle().resume();
    ASSERT_TRUE(task.done());
    EXPECT_EQ(task.result(), 10000);
}

}  // namespace
