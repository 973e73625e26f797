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
    # The main page's one-file program (\include, section main_one_page) is no step, but Doxygen
    # links its names (run, main, Context, choose_gid...) to the steps' symbols of the same name,
    # with their tooltips; no Doxygen option turns that off for one fragment. Its listing keeps
    # the colours and loses those links and tooltips.
    one_page='/id="main_one_page"/,/<!-- fragment -->/'
    sed -i "${one_page}"'{ s|<a class="code[^"]*" href="[^"]*"[^>]*>\([^<]*\)</a>|\1|g; /^<div class="ttc" /d; }' \
        "$html/index.html"
    if sed -n "${one_page}p" "$html/index.html" | grep -q 'class="code\|class="ttc"'; then
        echo "docs: the main page's one-file program still links to the steps' symbols" >&2
        rc=1
    fi
fi
echo "docs: $count Doxygen warning(s); log: $log"
exit "$rc"
