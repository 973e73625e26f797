#!/usr/bin/env bash
# docs/step-diff.sh ROOT PREVIOUS_STEP STEP OUT.html: the unified diff of a
# step's sources (*.cpp, *.hpp; not tests/) against the previous step's, as an
# HTML fragment for a chapter's "What changed since the previous step":
#     \htmlinclude[block] STEP.html
set -euo pipefail
root=$1 previous=$2 step=$3 out=$4
cd -- "$root"

shopt -s nullglob
names=()
for f in "$previous"/*.cpp "$previous"/*.hpp "$step"/*.cpp "$step"/*.hpp; do
    names+=("${f##*/}")
done
mapfile -t names < <(printf '%s\n' "${names[@]}" | sort -u)

diff_text=""
for name in "${names[@]}"; do
    old=$previous/$name new=$step/$name
    [[ -e $old ]] || old=/dev/null
    [[ -e $new ]] || new=/dev/null
    # diff exits 1 when the files differ; only 2 is a failure.
    chunk=$(diff -u --label "$previous/$name" --label "$step/$name" "$old" "$new") || (($? == 1))
    diff_text+=$chunk$'\n'
done

{
    added=$(grep -c '^+[^+]' <<<"$diff_text" || true)
    removed=$(grep -c '^-[^-]' <<<"$diff_text" || true)
    printf '<div class="step-diff">\n'
    printf '<p class="step-diff-summary"><code>%s</code> &rarr; <code>%s</code>: %d lines added, %d removed.</p>\n' \
        "$previous" "$step" "$added" "$removed"
    if [[ -z ${diff_text//$'\n'/} ]]; then
        printf '<p>The sources are identical.</p>\n'
    else
        printf '<pre class="step-diff-body">'
        awk '
            function esc(s) { gsub(/&/, "\\&amp;", s); gsub(/</, "\\&lt;", s); gsub(/>/, "\\&gt;", s); return s }
            /^$/ { next }
            /^(\+\+\+|---) / { printf "<span class=\"diff-file\">%s</span>\n", esc($0); next }
            /^@@/ { printf "<span class=\"diff-hunk\">%s</span>\n", esc($0); next }
            /^\+/ { printf "<span class=\"diff-add\">%s</span>\n", esc($0); next }
            /^-/  { printf "<span class=\"diff-del\">%s</span>\n", esc($0); next }
            { printf "<span class=\"diff-ctx\">%s</span>\n", esc($0) }
        ' <<<"$diff_text"
        printf '</pre>\n'
    fi
    printf '</div>\n'
} >"$out.tmp"
mv "$out.tmp" "$out"
