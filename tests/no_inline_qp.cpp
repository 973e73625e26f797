// no_inline_qp.so: an LD_PRELOAD fault injector for tests/no_inline.sh. It plays a device that
// allows no inline data: ibv_create_qp() with max_inline_data above 0 returns NULL with errno
// EINVAL, after writing "no_inline_qp: ibv_create_qp refuses max_inline_data N" to stderr; with
// 0 it writes "no_inline_qp: ibv_create_qp with max_inline_data 0" and calls the real one (which
// may still grant some: rxe grants what its work-queue entry holds anyway).
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

extern "C" ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
    static const auto create = reinterpret_cast<ibv_qp* (*)(ibv_pd*, ibv_qp_init_attr*)>(
        ::dlsym(RTLD_NEXT, "ibv_create_qp"));
    if (attr != nullptr && attr->cap.max_inline_data > 0) {
        char line[96];
        const int length = std::snprintf(line, sizeof line,
                                         "no_inline_qp: ibv_create_qp refuses max_inline_data %u\n",
                                         attr->cap.max_inline_data);
        (void)!::write(2, line, static_cast<std::size_t>(length));
        errno = EINVAL;
        return nullptr;
    }
    static const char line[] = "no_inline_qp: ibv_create_qp with max_inline_data 0\n";
    (void)!::write(2, line, sizeof line - 1);
    return create(pd, attr);
}
