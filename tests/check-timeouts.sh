#!/usr/bin/env bash
# tests/check-timeouts.sh BUILD_DIR: every CTest test in BUILD_DIR has a TIMEOUT property (> 0),
# so that nothing can hang CI. Names every test without one; exits 1 then.
# tests/check-timeouts.sh --list BUILD_DIR: prints "NAME TIMEOUT" for every test instead (the time
# table of tools/run-tests names the tests that took more than half of theirs).
# (It parses `ctest --show-only=json-v1` with CMake's own JSON reader: no extra tool needed.)
set -euo pipefail
list=0
[[ ${1:-} == --list ]] && { list=1; shift; }
build_dir=${1:?usage: tests/check-timeouts.sh [--list] BUILD_DIR}
ctest=${CTEST_COMMAND:-ctest}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/timeouts.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$ctest" --test-dir "$build_dir" --show-only=json-v1 >"$tmp/tests.json"
cat >"$tmp/check.cmake" <<'CMAKE'
file(READ "${JSON}" json)
string(JSON count LENGTH "${json}" tests)
set(missing "")
if(count GREATER 0)
    math(EXPR last "${count} - 1")
    foreach(i RANGE ${last})
        string(JSON name GET "${json}" tests ${i} name)
        set(timeout 0)
        string(JSON props ERROR_VARIABLE no_props GET "${json}" tests ${i} properties)
        if(NOT no_props)
            string(JSON nprops LENGTH "${props}")
            if(nprops GREATER 0)
                math(EXPR plast "${nprops} - 1")
                foreach(j RANGE ${plast})
                    string(JSON pname GET "${props}" ${j} name)
                    if(pname STREQUAL "TIMEOUT")
                        string(JSON timeout GET "${props}" ${j} value)
                    endif()
                endforeach()
            endif()
        endif()
        if(LIST)
            message("${name} ${timeout}")
        elseif(NOT timeout GREATER 0)
            list(APPEND missing "${name}")
        endif()
    endforeach()
endif()
if(LIST)
    return()
endif()
list(LENGTH missing nmissing)
if(nmissing GREATER 0)
    foreach(name IN LISTS missing)
        message("no TIMEOUT: ${name} (set_tests_properties(${name} PROPERTIES TIMEOUT s))")
    endforeach()
    message(FATAL_ERROR "${nmissing} of ${count} tests have no TIMEOUT")
endif()
if(count EQUAL 0)
    message(FATAL_ERROR "no test found: is this a configured build directory?")
endif()
message("every test has a TIMEOUT: ${count} tests")
CMAKE
if ((list)); then
    cmake -DJSON="$tmp/tests.json" -DLIST=1 -P "$tmp/check.cmake" 2>&1
else
    cmake -DJSON="$tmp/tests.json" -P "$tmp/check.cmake"
fi
