#!/usr/bin/env bash
# docs/run-doxygen.sh DOXYGEN DOXYFILE WARN_LOG: run Doxygen for the docs
# target, show its warnings in the build log, and count them.
# Doxygen's WARN_AS_ERROR (set by -DTUTORIAL_DOCS_WERROR=ON) decides whether a
# warning fails the build; this script passes Doxygen's exit status on.
set -uo pipefail
doxygen=$1 doxyfile=$2 log=$3
rm -f "$log"
"$doxygen" "$doxyfile"
rc=$?
count=0
if [[ -s $log ]]; then
    cat "$log" >&2
    count=$(grep -c ': warning: \|: error: ' "$log")
fi
# Doxygen puts each inline \dot graph in an <iframe> of the SVG's own size, which no style can
# shrink: a graph wider than the text column is cut off. An <img> of the same SVG scales down
# with the column (docs/tutorial.css); the inline graphs hold no links that an <img> would lose.
html=$(sed -n 's/^OUTPUT_DIRECTORY *= *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$doxyfile")/html
if [[ $rc -eq 0 && -d $html ]]; then
    sed -i 's|<iframe scrolling="no" frameborder="0" src="\(dot_inline_dotgraph_[0-9]*\.svg\)" width="[0-9]*" height="[0-9]*"><p><b>This browser is not able to show SVG: try Firefox, Chrome, Safari, or Opera instead\.</b></p></iframe>|<img src="\1" alt="diagram"/>|' "$html"/*.html
fi
echo "docs: $count Doxygen warning(s); log: $log"
exit "$rc"
