// fail_create_cq.so: an LD_PRELOAD fault injector for tests/unwind_after_channel.sh. It wraps the
// real libibverbs and fails one named call: every ibv_create_cq() returns NULL with errno ENOMEM,
// after writing "fail_create_cq: ibv_create_cq fails" to stderr. Every other verb is the real one.
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cerrno>

extern "C" ibv_cq* ibv_create_cq(ibv_context* /*context*/, int /*cqe*/, void* /*cq_context*/,
                                 ibv_comp_channel* /*channel*/, int /*comp_vector*/) {
    static const char line[] = "fail_create_cq: ibv_create_cq fails\n";
    (void)!::write(2, line, sizeof line - 1);
    errno = ENOMEM;
    return nullptr;
}
