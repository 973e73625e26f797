// RAII owners for verbs objects: one std::unique_ptr shape, a deleter that reports a failed
// destroy.
#pragma once

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace tutorial {

// One owner shape for every verbs object: a move-only std::unique_ptr whose
// deleter calls the destroy verb and reports, never throws, a failure.
template <typename T, auto Destroy, const char* Verb>
struct VerbsDeleter {
    void operator()(T* object) const noexcept {
        const int rc = Destroy(object);
        if (rc != 0) {
            const int err = rc > 0 ? rc : errno;  // ibv_close_device returns -1 and sets errno
            std::fprintf(stderr, "destroy failed: %s: %s (errno %d)\n", Verb, std::strerror(err),
                         err);
        }
    }
};
inline constexpr char kFreeDeviceList[] = "ibv_free_device_list";
inline constexpr char kCloseDevice[] = "ibv_close_device";
inline constexpr char kDeallocPd[] = "ibv_dealloc_pd";
inline constexpr char kFree[] = "free";
inline constexpr char kDeregMr[] = "ibv_dereg_mr";
inline constexpr char kDestroyCq[] = "ibv_destroy_cq";
inline constexpr char kDestroyQp[] = "ibv_destroy_qp";
inline constexpr char kDestroySrq[] = "ibv_destroy_srq";
inline int free_device_list(ibv_device** list) {
    ibv_free_device_list(list);
    return 0;
}
inline int free_buffer(std::byte* buffer) {
    std::free(buffer);
    return 0;
}
using DeviceList =
    std::unique_ptr<ibv_device*, VerbsDeleter<ibv_device*, free_device_list, kFreeDeviceList>>;
using Context =
    std::unique_ptr<ibv_context, VerbsDeleter<ibv_context, ibv_close_device, kCloseDevice>>;
using ProtectionDomain = std::unique_ptr<ibv_pd, VerbsDeleter<ibv_pd, ibv_dealloc_pd, kDeallocPd>>;
using Buffer = std::unique_ptr<std::byte, VerbsDeleter<std::byte, free_buffer, kFree>>;
using MemoryRegion = std::unique_ptr<ibv_mr, VerbsDeleter<ibv_mr, ibv_dereg_mr, kDeregMr>>;
using CompletionQueue = std::unique_ptr<ibv_cq, VerbsDeleter<ibv_cq, ibv_destroy_cq, kDestroyCq>>;
using QueuePair = std::unique_ptr<ibv_qp, VerbsDeleter<ibv_qp, ibv_destroy_qp, kDestroyQp>>;
using SharedReceiveQueueHandle =
    std::unique_ptr<ibv_srq, VerbsDeleter<ibv_srq, ibv_destroy_srq, kDestroySrq>>;

}  // namespace tutorial
