// RAII owners for verbs objects: one std::unique_ptr shape, a deleter that reports a failed
// destroy.
#pragma once

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace tutorial {

//! [raii]
// One owner shape for every verbs object: a move-only std::unique_ptr whose
// deleter calls the destroy verb and reports, never throws, a failure.
// Step 02 explains it; here it owns the device list and the open device.
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
inline int free_device_list(ibv_device** list) {
    ibv_free_device_list(list);
    return 0;
}
using DeviceList =
    std::unique_ptr<ibv_device*, VerbsDeleter<ibv_device*, free_device_list, kFreeDeviceList>>;
using Context =
    std::unique_ptr<ibv_context, VerbsDeleter<ibv_context, ibv_close_device, kCloseDevice>>;
//! [raii]

}  // namespace tutorial
