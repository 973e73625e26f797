// The client's entry point: connect to the server, ping-pong, and report.
#pragma once

#include "options.hpp"

namespace tutorial {

/// Runs one client against the server on o.host; returns the exit code.
int run_client(const Options& o);

}  // namespace tutorial
