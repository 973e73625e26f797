#!/usr/bin/env bash
# docs/step-diff.sh ROOT BASE_STEP STEP OUT.html
# docs/step-diff.sh --count ROOT BASE_STEP STEP
#
# The diff of a step's sources (*.cpp, *.hpp; not tests/) against its base
# step's, rename- and move-aware. BASE_STEP is the folder that STEP/BASE names
# (tests/step_base.py): the previous step in Part I, the core step a Part II
# step branches from. The first form writes an HTML fragment for a chapter's
# "What changed since" its base, which it names:
#     \htmlinclude[block] STEP.html
# The second prints six numbers: lines added, removed and moved in the whole
# step, then lines added, removed and moved in its carried files alone (those
# both steps have by name; a moved line counts on its new side, so code that
# leaves a carried file for a new one is counted with the new file).
#
# How: both steps' sources go into a throw-away git repository as two trees
# under the same folder, and `git diff --find-renames --color-moved=zebra`
# compares them. A line removed in one place and added in another (in the same
# or another file, whatever its indentation) is "moved", not added + removed:
# code that leaves main.cpp for a new header shows as moved. Git marks a moved
# block only when it holds at least 20 letters or digits, so a lone "}" is not
# a move. A file that did not change is one line: "file.hpp: unchanged".
set -euo pipefail

count_only=0
if [[ ${1-} == --count ]]; then
    count_only=1
    shift
    (($# == 3)) || { echo "usage: docs/step-diff.sh --count ROOT BASE_STEP STEP" >&2; exit 2; }
else
    (($# == 4)) || { echo "usage: docs/step-diff.sh ROOT BASE_STEP STEP OUT.html" >&2; exit 2; }
fi
root=$1 base=$2 step=$3 out=${4-}
cd -- "$root"
[[ -d $base && -d $step ]] || { echo "step-diff: no folder $base or $step in $root" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf -- "$tmp"' EXIT
# Nobody's git configuration may change the output.
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_DIR=$tmp/git GIT_WORK_TREE=$tmp/work
git init -q
mkdir -p "$tmp/work"

shopt -s nullglob
# snapshot STEP: the tree hash of STEP's sources.
snapshot() {
    rm -f -- "$tmp"/work/*
    local f
    for f in "$1"/*.cpp "$1"/*.hpp; do
        cp -- "$f" "$tmp/work/"
    done
    git add -A -- .
    git write-tree
}
old_tree=$(snapshot "$base")
new_tree=$(snapshot "$step")

unchanged=()
for f in "$base"/*.cpp "$base"/*.hpp; do
    name=${f##*/}
    [[ -f $step/$name ]] && cmp -s -- "$f" "$step/$name" && unchanged+=("$name")
done
mapfile -t unchanged < <(((${#unchanged[@]})) && printf '%s\n' "${unchanged[@]}" | sort)

# A fixed colour for each kind of line, so the classes can be read back from
# the escape sequences (git writes colours 1-7 as ESC[31m-ESC[37m, 8 and 9 as
# ESC[90m and ESC[91m): 1 added, 2 removed, 3/4 moved (added side, two
# alternating blocks), 5/6 moved (removed side), 7 file header, 8 hunk, 9 context.
diff_text=$(git -c core.quotePath=false \
    -c color.diff.new=1 -c color.diff.old=2 \
    -c color.diff.newMoved=3 -c color.diff.newMovedAlternative=4 \
    -c color.diff.oldMoved=5 -c color.diff.oldMovedAlternative=6 \
    -c color.diff.meta=7 -c color.diff.frag=8 -c color.diff.context=9 -c color.diff.func=8 \
    diff --color=always --find-renames --color-moved=zebra \
    --color-moved-ws=allow-indentation-change --ws-error-highlight=none \
    --src-prefix="$base/" --dst-prefix="$step/" \
    "$old_tree" "$new_tree" --)

# One line per diff line: KIND<TAB>text, KIND one of add del move-add move-del
# file hunk ctx (and move-add-alt, move-del-alt for zebra's second colour).
classify() {
    awk '
        {
            line = $0
            kind = "ctx"
            if (match(line, /^\033\[[39][0-9]m/)) {
                code = substr(line, 3, 2) + 0
                code = (code >= 90) ? code - 82 : code - 30
                kind = (code == "1") ? "add" : (code == "2") ? "del" : \
                       (code == "3") ? "move-add" : (code == "4") ? "move-add-alt" : \
                       (code == "5") ? "move-del" : (code == "6") ? "move-del-alt" : \
                       (code == "7") ? "file" : (code == "8") ? "hunk" : "ctx"
            }
            gsub(/\033\[[0-9;]*m/, "", line)
            if (kind == "file" && line ~ /^(diff --git|index) /) next
            if (line == "") next
            print kind "\t" line
        }'
}
classified=$(classify <<<"$diff_text")
# Lines added, removed and moved (on the new side): in all files, then in the
# carried files, whose "--- BASE/name" and "+++ STEP/name" headers name one file.
read -r added removed moved carried_added carried_removed carried_moved < <(
    awk -F '\t' '
        function name(s) { s = substr(s, 5); return (s == "/dev/null") ? "" : substr(s, index(s, "/") + 1) }
        $1 == "file" && substr($2, 1, 4) == "--- " { old = name($2) }
        $1 == "file" && substr($2, 1, 4) == "+++ " { new = name($2) }
        {
            k = ($1 == "add") ? 1 : ($1 == "del") ? 2 : ($1 ~ /^move-add/) ? 3 : 0
            if (k == 0) next
            n[k]++
            if (old != "" && old == new) c[k]++
        }
        END { printf "%d %d %d %d %d %d\n", n[1], n[2], n[3], c[1], c[2], c[3] }' <<<"$classified")

if ((count_only)); then
    echo "$added $removed $moved $carried_added $carried_removed $carried_moved"
    exit 0
fi

{
    printf '<div class="step-diff">\n'
    printf '<p class="step-diff-summary">Against its base step, <code>%s</code> &rarr; <code>%s</code>: %d lines added, %d removed, %d moved; of these, in the files both steps have, %d added, %d removed, %d moved.</p>\n' \
        "$base" "$step" "$added" "$removed" "$moved" "$carried_added" "$carried_removed" "$carried_moved"
    if [[ -z $classified && ${#unchanged[@]} -eq 0 ]]; then
        printf '<p>Neither step has sources.</p>\n'
    elif [[ -z $classified ]]; then
        printf '<p>The sources are identical.</p>\n'
    fi
    # The diff is folded: a chapter page is long enough without it.
    printf '<details class="step-diff-fold"><summary>Show the diff (%d lines)</summary>\n' "$(($(wc -l <<<"$classified") + ${#unchanged[@]}))"
    printf '<pre class="step-diff-body">'
    for name in "${unchanged[@]}"; do
        printf '<span class="diff-same">%s: unchanged</span>\n' "$name"
    done
    awk -F '\t' '
        function esc(s) { gsub(/&/, "\\&amp;", s); gsub(/</, "\\&lt;", s); gsub(/>/, "\\&gt;", s); return s }
        {
            kind = $1
            text = substr($0, length(kind) + 2)
            cls = (kind == "move-add-alt") ? "diff-move-add diff-move-alt" : \
                  (kind == "move-del-alt") ? "diff-move-del diff-move-alt" : "diff-" kind
            printf "<span class=\"%s\">%s</span>\n", cls, esc(text)
        }' <<<"$classified"
    printf '</pre>\n'
    printf '</details>\n'
    printf '</div>\n'
} >"$out.tmp"
mv -- "$out.tmp" "$out"
