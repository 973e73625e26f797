// step09 tests: a counting global operator new, linked into step09_alloc_count (the program's
// own sources plus this file). Every form of operator new (plain, array, aligned, nothrow) counts
// one allocation; at exit the program writes "allocations: N" to stderr. tests/alloc.sh runs
// it with -n 1000 and -n 11000: the counts must be equal, so no message allocates.
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace {

// One thread runs the program; atomic all the same, in case a library calls operator new from
// a thread of its own.
std::atomic<unsigned long long> g_allocations{0};

void* allocate(std::size_t size) noexcept {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    return std::malloc(size == 0 ? 1 : size);
}

void* allocate_aligned(std::size_t size, std::align_val_t align) noexcept {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    std::size_t alignment = static_cast<std::size_t>(align);
    if (alignment < sizeof(void*)) { alignment = sizeof(void*); }
    void* p = nullptr;
    return ::posix_memalign(&p, alignment, size == 0 ? 1 : size) == 0 ? p : nullptr;
}

void* allocate_or_throw(std::size_t size) {
    void* p = allocate(size);
    if (p == nullptr) { throw std::bad_alloc(); }
    return p;
}

void* allocate_aligned_or_throw(std::size_t size, std::align_val_t align) {
    void* p = allocate_aligned(size, align);
    if (p == nullptr) { throw std::bad_alloc(); }
    return p;
}

// "allocations: N\n" with write(2): no stdio, which may be gone or allocate at exit.
void write_count() {
    char text[64] = "allocations: ";
    std::size_t len = 13;
    char digits[24];
    std::size_t n = 0;
    unsigned long long value = g_allocations.load(std::memory_order_relaxed);
    do {
        digits[n++] = static_cast<char>('0' + value % 10);
        value /= 10;
    } while (value != 0);
    while (n > 0) { text[len++] = digits[--n]; }
    text[len++] = '\n';
    const ssize_t written = ::write(STDERR_FILENO, text, len);
    static_cast<void>(written);
}

// Destroyed after main() returns, with the other statics; the program makes no thread, so
// nothing allocates concurrently.
struct ReportAtExit {
    ReportAtExit() = default;
    ReportAtExit(const ReportAtExit&) = delete;
    ReportAtExit& operator=(const ReportAtExit&) = delete;
    ~ReportAtExit() { write_count(); }
};
const ReportAtExit g_report;

}  // namespace

void* operator new(std::size_t size) { return allocate_or_throw(size); }
void* operator new[](std::size_t size) { return allocate_or_throw(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return allocate(size); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept { return allocate(size); }
void* operator new(std::size_t size, std::align_val_t align) {
    return allocate_aligned_or_throw(size, align);
}
void* operator new[](std::size_t size, std::align_val_t align) {
    return allocate_aligned_or_throw(size, align);
}
void* operator new(std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
    return allocate_aligned(size, align);
}
void* operator new[](std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
    return allocate_aligned(size, align);
}

void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
