#!/bin/sh
# docs/snippet-marker-filter.sh FILE: the Doxygen filter (FILTER_PATTERNS) for the steps' sources.
# A \snippet block is marked in the source by a line `//! [name]`. To Doxygen's parser
# that line is a documentation comment, so "[name]" became the brief description of the
# next class or member in the API reference. This filter hands the parser `// [name]`
# instead (same line count, nothing else changed); \snippet reads the file itself, unfiltered.
exec sed -e 's|^\([[:space:]]*\)//! \(\[[A-Za-z0-9_-]*\]\)[[:space:]]*$|\1// \2|' -- "$1"
