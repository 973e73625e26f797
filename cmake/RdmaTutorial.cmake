# The tutorial's shared test helpers. Each step's CMakeLists.txt builds its program by itself
# and includes this file (when it exists) only to register its tests; the top-level
# CMakeLists.txt includes it for the cross-step tests. A step copied out alone builds its
# program without it (tests/copy_out_build.sh checks this).
include_guard(GLOBAL)

set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)
set(CMAKE_EXPORT_COMPILE_COMMANDS ON)
if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
    set(CMAKE_BUILD_TYPE RelWithDebInfo)
endif()

option(TUTORIAL_WERROR "Treat compiler warnings as errors (CI)" OFF)
option(TUTORIAL_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)

find_package(PkgConfig REQUIRED)
pkg_check_modules(IBVERBS REQUIRED IMPORTED_TARGET GLOBAL libibverbs)
find_package(GTest QUIET)
find_package(Threads REQUIRED)

set(RDMA_TUTORIAL_ROOT ${CMAKE_CURRENT_LIST_DIR}/.. CACHE INTERNAL "")
set(RDMA_TUTORIAL_TESTLIB ${CMAKE_CURRENT_LIST_DIR}/testlib.sh CACHE INTERNAL "")

# Every program run by a test prints "destroy failed:" when an RAII destroy
# fails (see step02); any such line fails the test.
set(RDMA_TUTORIAL_FAIL_REGEX "destroy failed:")

# _rdma_tutorial_flags(TARGET): warnings and the sanitizers, as each step sets them for its
# program, for a test program.
function(_rdma_tutorial_flags target)
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic)
    if(TUTORIAL_WERROR)
        target_compile_options(${target} PRIVATE -Werror)
    endif()
    if(TUTORIAL_SANITIZE)
        target_compile_options(${target} PRIVATE -fsanitize=address,undefined
                                                 -fno-omit-frame-pointer -fno-sanitize-recover=all)
        target_link_options(${target} PRIVATE -fsanitize=address,undefined)
    endif()
endfunction()

# _rdma_tutorial_host_only(TARGET): a unit test, which runs on the host, compiled at -O0 in the
# sanitizer build. The asan preset compiles at -O1 (CMakePresets.json) because the programs that
# run in the lab's emulated CPU are a third faster for it; a unit test is fast on the host either
# way, and -O0 halves its compile time (docs/maintainers.md, CI time).
function(_rdma_tutorial_host_only target)
    if(TUTORIAL_SANITIZE)
        target_compile_options(${target} PRIVATE -O0)
    endif()
endfunction()

# _rdma_tutorial_device_test_properties(NAME LABEL l TIMEOUT s [ENVIRONMENT VAR=value...]): the
# properties every device test shares, script or GoogleTest program: its label and TIMEOUT,
# exit status 77 reported as skipped, and any "destroy failed:" line failing it.
# Each device test also gets TEST_PORT_BASE, the first of 200 TCP ports that are its own (testlib's
# new_port hands them out), so that tests that run at once (ctest -j in the lab) never share one.
# SERIAL: the test runs alone (RUN_SERIAL), for a test that bounds a wait tightly in wall-clock
# time; the device passes run the others several at a time (ctest -j in the lab, CMakePresets.json).
# KERNEL 6.12: the test belongs to that kernel (label kernel_6.12; docs/maintainers.md).
function(_rdma_tutorial_device_test_properties name)
    cmake_parse_arguments(ARG "SERIAL" "LABEL;TIMEOUT;KERNEL" "ENVIRONMENT" ${ARGN})
    set(labels ${ARG_LABEL})
    if(ARG_KERNEL)
        list(APPEND labels kernel_${ARG_KERNEL})
    endif()
    # COST: ctest, four at a time, starts the costliest tests first; a TIMEOUT is about twice a
    # test's longest time (docs/maintainers.md), a fair guess at its cost. Started last, a
    # 280-second test ran almost alone at the end of the ASan pass.
    set_tests_properties(${name} PROPERTIES
        LABELS "${labels}"
        TIMEOUT ${ARG_TIMEOUT}
        COST ${ARG_TIMEOUT}
        SKIP_RETURN_CODE 77
        FAIL_REGULAR_EXPRESSION "${RDMA_TUTORIAL_FAIL_REGEX}")
    if(ARG_SERIAL)
        set_tests_properties(${name} PROPERTIES RUN_SERIAL TRUE)
    endif()
    rdma_tutorial_port_base(base)
    list(APPEND ARG_ENVIRONMENT "TEST_PORT_BASE=${base}")
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "${ARG_ENVIRONMENT}")
endfunction()

# rdma_tutorial_port_base(VAR): the next test's block of 200 TCP ports, in VAR: from 10000 up to
# the kernel's ephemeral ports (32768 to 60999, its default ip_local_port_range), then from 61000
# up: 112 blocks below them, 22 above.
function(rdma_tutorial_port_base var)
    get_property(blocks GLOBAL PROPERTY RDMA_TUTORIAL_PORT_BLOCKS)
    if(NOT blocks)
        set(blocks 0)
    endif()
    math(EXPR base "10000 + 200 * ${blocks}")
    if(base GREATER 32400)
        math(EXPR base "61000 + 200 * (${blocks} - 112)")
    endif()
    if(base GREATER 65335)
        message(FATAL_ERROR "more than 134 device tests: no TCP port block is left outside the ephemeral ports")
    endif()
    math(EXPR blocks "${blocks} + 1")
    set_property(GLOBAL PROPERTY RDMA_TUTORIAL_PORT_BLOCKS ${blocks})
    set(${var} ${base} PARENT_SCOPE)
endfunction()

# rdma_tutorial_unit_test(NAME SOURCES t.cpp... [LINK lib...]): a GoogleTest
# program with the label "unit": it needs no device.
function(rdma_tutorial_unit_test name)
    cmake_parse_arguments(ARG "" "" "SOURCES;LINK" ${ARGN})
    if(NOT GTest_FOUND)
        message(WARNING "GoogleTest not found: ${name} is not built (run tools/install-deps.sh)")
        return()
    endif()
    add_executable(${name} ${ARG_SOURCES})
    target_link_libraries(${name} PRIVATE GTest::gtest_main ${ARG_LINK})
    _rdma_tutorial_flags(${name})
    _rdma_tutorial_host_only(${name})
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES LABELS unit TIMEOUT 60)
endfunction()

# rdma_tutorial_device_test(NAME SCRIPT file.sh [TIMEOUT s] [LABEL l] [KERNEL 6.1|6.12] [SERIAL]
# [ARGS ...]): a bash test, by default with the label "rdma"; KERNEL: it belongs to one kernel
# (docs/maintainers.md); SERIAL: it runs alone. Through testlib.sh's
# require_device it exits 77 (reported as skipped) when no device is present,
# or fails instead when RDMA_REQUIRE_DEVICE=1. LABEL unit is for script tests
# that need no device (options, usage errors).
function(rdma_tutorial_device_test name)
    cmake_parse_arguments(ARG "SERIAL" "SCRIPT;TIMEOUT;LABEL;KERNEL" "ARGS" ${ARGN})
    if(NOT ARG_TIMEOUT)
        set(ARG_TIMEOUT 120)
    endif()
    if(NOT ARG_LABEL)
        set(ARG_LABEL rdma)
    endif()
    add_test(NAME ${name}
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/${ARG_SCRIPT} ${ARG_ARGS})
    set(more)
    if(ARG_SERIAL)
        list(APPEND more SERIAL)
    endif()
    if(ARG_KERNEL)
        list(APPEND more KERNEL ${ARG_KERNEL})
    endif()
    _rdma_tutorial_device_test_properties(${name} LABEL ${ARG_LABEL} TIMEOUT ${ARG_TIMEOUT}
        ${more}
        ENVIRONMENT "TESTLIB=${RDMA_TUTORIAL_TESTLIB}" "TUTORIAL_ROOT=${RDMA_TUTORIAL_ROOT}")
endfunction()

# rdma_tutorial_device_gtest(NAME SOURCES t.cpp... [LINK lib...] [TIMEOUT s]): a
# GoogleTest program that needs a device, with the label "rdma". It brings its
# own main(), which exits 77 (reported as skipped) when its tests skipped for
# lack of a device; with RDMA_REQUIRE_DEVICE=1 those tests fail instead.
function(rdma_tutorial_device_gtest name)
    cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;LINK" ${ARGN})
    if(NOT GTest_FOUND)
        message(WARNING "GoogleTest not found: ${name} is not built (run tools/install-deps.sh)")
        return()
    endif()
    if(NOT ARG_TIMEOUT)
        set(ARG_TIMEOUT 120)
    endif()
    add_executable(${name} ${ARG_SOURCES})
    target_link_libraries(${name} PRIVATE GTest::gtest ${ARG_LINK})
    _rdma_tutorial_flags(${name})
    add_test(NAME ${name} COMMAND ${name})
    _rdma_tutorial_device_test_properties(${name} LABEL rdma TIMEOUT ${ARG_TIMEOUT})
endfunction()

# rdma_tutorial_patched_copy(NAME PATCH exercises/x.patch SOURCES a.cpp... [OUTPUT var]): at build
# time, copies the step's .cpp and .hpp files to NAME-src in the build tree and applies the patch
# there (patch -p1, paths as in the step's folder). Sets var to the patched SOURCES; a target that
# builds them depends on the copy. A patch that no longer applies exactly (at its own line
# numbers, without fuzz) fails the build, naming it.
function(rdma_tutorial_patched_copy name)
    cmake_parse_arguments(ARG "" "PATCH;OUTPUT" "SOURCES" ${ARGN})
    set(dir ${CMAKE_CURRENT_BINARY_DIR}/${name}-src)
    set(patch ${CMAKE_CURRENT_SOURCE_DIR}/${ARG_PATCH})
    file(GLOB step_files CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp
         ${CMAKE_CURRENT_SOURCE_DIR}/*.hpp)
    set(patched)
    set(nested)  # SOURCES in a subfolder (tests/x.cpp): copied to the same place in the copy
    set(copy_nested)
    foreach(source IN LISTS ARG_SOURCES)
        list(APPEND patched ${dir}/${source})
        get_filename_component(sub ${source} DIRECTORY)
        if(sub)
            list(APPEND nested ${CMAKE_CURRENT_SOURCE_DIR}/${source})
            list(APPEND copy_nested COMMAND ${CMAKE_COMMAND} -E make_directory ${dir}/${sub}
                 COMMAND ${CMAKE_COMMAND} -E copy ${CMAKE_CURRENT_SOURCE_DIR}/${source}
                         ${dir}/${sub})
        endif()
    endforeach()
    add_custom_command(OUTPUT ${patched}
        COMMAND ${CMAKE_COMMAND} -E rm -rf ${dir}
        COMMAND ${CMAKE_COMMAND} -E make_directory ${dir}
        COMMAND ${CMAKE_COMMAND} -E copy ${step_files} ${dir}
        ${copy_nested}
        COMMAND sh -c "out=$(patch --forward --fuzz=0 -p1 -d \"$1\" -i \"$2\") || { printf '%s\\n' \"$out\"; exit 1; }; case $out in *offset*) printf '%s\\n' \"$out\" \"$2: a hunk applies only at an offset; regenerate the patch\"; exit 1;; esac" sh ${dir} ${patch}
        DEPENDS ${step_files} ${nested} ${patch}
        COMMENT "Applying ${ARG_PATCH} to a copy of ${PROJECT_NAME} (${name})"
        VERBATIM)
    if(ARG_OUTPUT)
        set(${ARG_OUTPUT} ${patched} PARENT_SCOPE)
    endif()
endfunction()

# rdma_tutorial_exercise(NAME PATCH exercises/x.patch SOURCES main.cpp... SCRIPT tests/x.sh
# [LINK lib...] [TIMEOUT s] [LABEL l] [SERIAL] [ARGS ...]): the answer to a chapter's exercise that
# needs a code change, run, or a test that needs a program patched to misbehave: NAME is built from
# the step's patched copy (rdma_tutorial_patched_copy) of SOURCES, linked with LINK (the step's
# own library, when the patch leaves its sources alone), and the device test NAME (label rdma,
# or LABEL) runs SCRIPT with the patched program's path first, then ARGS.
function(rdma_tutorial_exercise name)
    cmake_parse_arguments(ARG "SERIAL" "PATCH;SCRIPT;TIMEOUT;LABEL" "SOURCES;ARGS;LINK" ${ARGN})
    rdma_tutorial_patched_copy(${name} PATCH ${ARG_PATCH} SOURCES ${ARG_SOURCES} OUTPUT patched)
    add_executable(${name} ${patched})
    target_link_libraries(${name} PRIVATE PkgConfig::IBVERBS Threads::Threads ${ARG_LINK})
    _rdma_tutorial_flags(${name})
    if(NOT ARG_TIMEOUT)
        set(ARG_TIMEOUT 120)
    endif()
    add_test(NAME ${name}
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/${ARG_SCRIPT} $<TARGET_FILE:${name}>
                     ${ARG_ARGS})
    set(serial)
    if(ARG_SERIAL)
        set(serial SERIAL)
    endif()
    if(NOT ARG_LABEL)
        set(ARG_LABEL rdma)
    endif()
    _rdma_tutorial_device_test_properties(${name} LABEL ${ARG_LABEL} TIMEOUT ${ARG_TIMEOUT} ${serial}
        ENVIRONMENT "TESTLIB=${RDMA_TUTORIAL_TESTLIB}" "TUTORIAL_ROOT=${RDMA_TUTORIAL_ROOT}")
endfunction()

# rdma_tutorial_exercise_unit(NAME PATCH exercises/x.patch SOURCES a.cpp tests/t.cpp... FAILS
# Suite.Test [OTHER_SOURCES /abs/t.cpp...] [LINK lib...]): the answer to an exercise that a unit
# test shows: the GoogleTest program NAME is built from the step's patched copy (and
# OTHER_SOURCES, a test kept outside the step, with the copy on its include path), and the test
# NAME (label unit) passes when Suite.Test fails there, as the answer says.
function(rdma_tutorial_exercise_unit name)
    cmake_parse_arguments(ARG "" "PATCH;FAILS" "SOURCES;OTHER_SOURCES;LINK" ${ARGN})
    if(NOT GTest_FOUND)
        return()
    endif()
    rdma_tutorial_patched_copy(${name} PATCH ${ARG_PATCH} SOURCES ${ARG_SOURCES} OUTPUT patched)
    add_executable(${name} ${patched} ${ARG_OTHER_SOURCES})
    target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_BINARY_DIR}/${name}-src)
    target_link_libraries(${name} PRIVATE GTest::gtest_main PkgConfig::IBVERBS Threads::Threads
                                          ${ARG_LINK})
    _rdma_tutorial_flags(${name})
    _rdma_tutorial_host_only(${name})
    add_test(NAME ${name} COMMAND bash ${RDMA_TUTORIAL_ROOT}/tests/exercise_unit_fails.sh
                                  $<TARGET_FILE:${name}> ${ARG_FAILS})
    set_tests_properties(${name} PROPERTIES LABELS unit TIMEOUT 60
                         ENVIRONMENT "TESTLIB=${RDMA_TUTORIAL_TESTLIB}")
endfunction()
