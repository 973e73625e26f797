// Step 07: the client's entry point: one coroutine that connects, ping-pongs and reports.
#pragma once

#include "options.hpp"

namespace tutorial {

/// Runs one client against the server on o.host, on a one-thread reactor; returns the exit code.
int run_client(const Options& o);

}  // namespace tutorial
