# docs/perf-summary.cmake: turns the summary.md that bench/epoll-vs-reference --samples writes
# into a fragment the performance page can pull in with \includedoc (Doxygen markdown):
#   cmake -DIN=docs/perf/summary.md -DOUT=<build>/docs/perf/epoll-vs-reference-summary.md -P docs/perf-summary.cmake
# - its "# title" line goes (a level-1 heading inside \includedoc makes Doxygen drop the text);
# - option names (--spin-us) go in backticks, or Doxygen prints "--" as a dash;
# - "<=" becomes "≤", ">=" "≥"; each "flood: ..." line becomes a list item (else they run together).
if(NOT IN OR NOT OUT)
    message(FATAL_ERROR "usage: cmake -DIN=summary.md -DOUT=fragment.md -P perf-summary.cmake")
endif()
file(STRINGS "${IN}" lines ENCODING UTF-8)
set(text "")
foreach(line IN LISTS lines)
    if(line MATCHES "^# ")
        continue()
    endif()
    string(REGEX REPLACE "(^|[ (|])(--[a-z][a-z0-9-]*)" "\\1`\\2`" line "${line}")
    string(REPLACE "<=" "≤" line "${line}")
    string(REPLACE ">=" "≥" line "${line}")
    if(line MATCHES "^flood: ")
        set(line "- ${line}")
    endif()
    string(APPEND text "${line}\n")
endforeach()
file(WRITE "${OUT}" "${text}")
