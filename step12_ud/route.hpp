// The route to the server, with no packet sent: a UDP socket connected to HOST knows which local
// address the kernel would send from. On RoCE v2 a GID is an IP address: the server's GID is
// HOST's address, and ours is the one on that route.
#pragma once

#include "errors.hpp"
#include "gid.hpp"
#include "tcp.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace tutorial {

struct Route {
    Socket socket;      // connected, never used to send: local_address_bytes() reads it
    GidBytes remote{};  // HOST's address as a RoCE v2 GID
};

[[nodiscard]] inline Route route_to(const std::string& host) {
    const AddressList addresses(host.c_str(), 4791, false);  // 4791: RoCE v2's UDP port
    int last_error = 0;
    for (const addrinfo* a = addresses.list; a != nullptr; a = a->ai_next) {
        Route route{Socket(::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0)), {}};
        if (route.socket.get() < 0 ||
            ::connect(route.socket.get(), a->ai_addr, a->ai_addrlen) != 0) {
            last_error = errno;
            continue;
        }
        if (a->ai_family == AF_INET) {
            route.remote[10] = route.remote[11] = 0xff;
            std::memcpy(&route.remote[12],
                        &reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr, 4);
        } else {
            std::memcpy(route.remote.data(),
                        &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr, 16);
        }
        return route;
    }
    throw TutorialError(kExitPeer, "no route to " + host + ": " + std::strerror(last_error));
}

}  // namespace tutorial
