// Fuzz target: handshake v2 as step05_endpoint's RDMAEndpoint decodes it (decode_handshake_v2), the
// 64 bytes a peer sends over TCP; round trips both ways (see endpoint_properties.hpp).
#include "../step05_endpoint/rdma_endpoint.cpp"
#include "endpoint_properties.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::check_handshake_v2(data, size);
    return 0;
}
