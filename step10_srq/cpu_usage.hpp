// The CPU time and context switches of this process so far, for the client's and server's
// "cpu:" lines.
#pragma once

#include <sys/resource.h>

namespace tutorial {

struct CpuUsage {
    double user_s = 0, system_s = 0;
    long voluntary = 0, involuntary = 0;
};

inline CpuUsage cpu_usage() {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    CpuUsage c;
    c.user_s = static_cast<double>(usage.ru_utime.tv_sec) +
               static_cast<double>(usage.ru_utime.tv_usec) / 1e6;
    c.system_s = static_cast<double>(usage.ru_stime.tv_sec) +
                 static_cast<double>(usage.ru_stime.tv_usec) / 1e6;
    c.voluntary = usage.ru_nvcsw;
    c.involuntary = usage.ru_nivcsw;
    return c;
}

}  // namespace tutorial
