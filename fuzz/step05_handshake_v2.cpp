// Fuzz target: handshake v3 as step05_endpoint's handshake.cpp decodes it (decode_handshake_v3),
// the 64 bytes a peer sends over TCP; round trips both ways and the -s/-n mismatch line (see
// endpoint_properties.hpp). The file keeps its v2 name: the seed corpus and tools use it.
// fuzz-sources: step05_endpoint/rdma_endpoint.cpp
#include "../step05_endpoint/handshake.cpp"
#include "endpoint_properties.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::check_handshake_v3(data, size);
    return 0;
}
