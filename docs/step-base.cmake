# docs/step-base.cmake: each step's base step, as its BASE file declares it, for CMake.
# The same rules as tests/step_base.py (which says what BASE is): one line, the name of an
# earlier step folder; no BASE, no base.
#   include(step-base.cmake)  then  tutorial_step_base(ROOT STEP VAR): VAR is the base step's
#                                   folder name, or empty; a bad BASE is a fatal error.
#   cmake -DROOT=DIR -P docs/step-base.cmake   prints "STEP BASE" per step ("-" for none), or
#                                   the errors and exit status 1 (tests/step_base_test.py runs it).

# tutorial_step_base_check(ROOT STEP VAR ERROR_VAR): VAR is STEP's base, ERROR_VAR the error.
function(tutorial_step_base_check root step out_var error_var)
    set(${out_var} "" PARENT_SCOPE)
    set(${error_var} "" PARENT_SCOPE)
    set(declared ${root}/${step}/BASE)
    if(NOT EXISTS ${declared})
        return()
    endif()
    file(READ ${declared} text)
    if(NOT text MATCHES "^(step[0-9][0-9]_[A-Za-z0-9_]+)\n?$")
        set(${error_var} "${step}/BASE: must hold one line, the name of the step folder ${step} starts from (e.g. step01_devices)" PARENT_SCOPE)
        return()
    endif()
    set(name ${CMAKE_MATCH_1})
    if(NOT IS_DIRECTORY ${root}/${name} OR NOT name MATCHES "^step[0-9][0-9]_")
        set(${error_var} "${step}/BASE: names ${name}, which is not a step folder in ${root}" PARENT_SCOPE)
    elseif(NOT name STRLESS step)
        set(${error_var} "${step}/BASE: names ${name}, which is not an earlier step than ${step}" PARENT_SCOPE)
    else()
        set(${out_var} ${name} PARENT_SCOPE)
    endif()
endfunction()

# tutorial_step_base(ROOT STEP VAR): VAR is STEP's base, or empty; a bad BASE stops CMake.
# CMake runs again when the BASE file changes.
function(tutorial_step_base root step out_var)
    tutorial_step_base_check(${root} ${step} base error)
    if(error)
        message(FATAL_ERROR "${error}")
    endif()
    if(EXISTS ${root}/${step}/BASE)
        set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${root}/${step}/BASE)
    endif()
    set(${out_var} "${base}" PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
    if(NOT ROOT)
        message(FATAL_ERROR "usage: cmake -DROOT=DIR -P docs/step-base.cmake")
    endif()
    file(GLOB step_dirs LIST_DIRECTORIES true RELATIVE ${ROOT} ${ROOT}/step[0-9][0-9]_*)
    list(SORT step_dirs)
    set(lines "")
    set(errors "")
    foreach(step IN LISTS step_dirs)
        if(IS_DIRECTORY ${ROOT}/${step})
            tutorial_step_base_check(${ROOT} ${step} base error)
            if(error)
                list(APPEND errors "${error}")
            elseif(base)
                list(APPEND lines "${step} ${base}")
            else()
                list(APPEND lines "${step} -")
            endif()
        endif()
    endforeach()
    if(errors)
        list(JOIN errors "\n" text)
        message(NOTICE "${text}")  # as written: FATAL_ERROR would wrap the lines
        message(FATAL_ERROR "${ROOT}: a BASE file is in error")
    endif()
    list(JOIN lines "\n" text)
    message(NOTICE "${text}")
endif()
