// Step 09 unit test: a million awaited Tasks run in constant stack, because a Task's end resumes
// its awaiter by symmetric transfer (task.hpp's FinalAwaiter returns the awaiter's handle).
#include <gtest/gtest.h>
#include <pthread.h>

#include <cstddef>
#include <cstdlib>

#include "../task.hpp"

namespace {

using tutorial::Task;

Task<int> one() { co_return 1; }

Task<long> sum_of_ones(int count) {
    long sum = 0;
    for (int i = 0; i < count; ++i) { sum += co_await one(); }
    co_return sum;
}

// Runs fn on a new thread with a stack of stack_bytes, and waits for it.
template <typename F>
bool run_on_stack_of(std::size_t stack_bytes, F fn) {
    pthread_attr_t attr;
    pthread_t thread;
    if (pthread_attr_init(&attr) != 0 || pthread_attr_setstacksize(&attr, stack_bytes) != 0) {
        return false;
    }
    auto body = [](void* f) -> void* {
        (*static_cast<F*>(f))();
        return nullptr;
    };
    const bool started = pthread_create(&thread, &attr, body, &fn) == 0;
    pthread_attr_destroy(&attr);
    return started && pthread_join(thread, nullptr) == 0;
}

// A million tasks that complete without suspending, awaited in a loop on a 64 KiB stack. With
// symmetric transfer each task's end jumps back into the loop and the stack stays flat. A
// final_suspend that called continuation.resume() instead would nest the loop's frame and the
// task's once per task and overflow the stack: the child dies of SIGSEGV (or of ASan's
// stack-overflow report). It runs in a child process, so that such a crash fails this test by
// name. The tail call is the compiler's: CMakeLists.txt builds this test at -O2 and without ASan.
TEST(TaskDeathTest, AwaitsAMillionTasksOnA64KiBStack) {
    constexpr int kTasks = 1'000'000;
    EXPECT_EXIT(
        {
            long sum = 0;
            const bool ran = run_on_stack_of(64 * 1024, [&sum] {
                Task<long> task = sum_of_ones(kTasks);
                task.handle().resume();
                sum = task.done() ? task.result() : -1;
            });
            std::exit(ran && sum == kTasks ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "");
}

}  // namespace
