// fail_create_cq.so: an LD_PRELOAD fault injector for tests/unwind_after_channel.sh. It wraps the
// real libibverbs and fails one named call: every ibv_create_cq() returns NULL with errno ENOMEM,
// after writing "fail_create_cq: ibv_create_cq fails" to stderr. It also watches the unwinding:
// ibv_destroy_comp_channel() on a channel whose context ibv_close_device() already closed would
// lock that context's freed mutex, so it writes "fail_create_cq: ibv_destroy_comp_channel after
// ibv_close_device of its context" and returns without calling the real one.
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cerrno>

namespace {

ibv_context* closed_context = nullptr;

void say(const char* line, std::size_t length) { (void)!::write(2, line, length); }

template <typename Fn>
Fn real(const char* name) {
    return reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" ibv_cq* ibv_create_cq(ibv_context* /*context*/, int /*cqe*/, void* /*cq_context*/,
                                 ibv_comp_channel* /*channel*/, int /*comp_vector*/) {
    static const char line[] = "fail_create_cq: ibv_create_cq fails\n";
    say(line, sizeof line - 1);
    errno = ENOMEM;
    return nullptr;
}

extern "C" int ibv_close_device(ibv_context* context) {
    static const auto close_device = real<int (*)(ibv_context*)>("ibv_close_device");
    closed_context = context;
    return close_device(context);
}

extern "C" int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
    static const auto destroy = real<int (*)(ibv_comp_channel*)>("ibv_destroy_comp_channel");
    if (channel != nullptr && channel->context == closed_context) {
        static const char line[] =
            "fail_create_cq: ibv_destroy_comp_channel after ibv_close_device of its context\n";
        say(line, sizeof line - 1);
        return 0;
    }
    return destroy(channel);
}
