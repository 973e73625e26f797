#!/usr/bin/env python3
"""reader_path.py ROOT BUILD_DIR: the reader's path holds only what a reader uses.

The pages a newcomer reads first (README.md, docs/performance.md, docs/lab.md, docs/glossary.md)
carry no maintainer material: no commit hash, no ctest command, preset (other than CMake's
`default`) or label, no test name, no dated run log, no project issue and no "For maintainers"
section. The chapters, the concept pages and the exercises name no test either, and no page of
the reader's path links to the history kept on the maintainers' performance page. Test names come
from `ctest -N` in BUILD_DIR ($CTEST_COMMAND, else ctest). Reads the markdown sources, not the site: the tables that
docs/perf/ holds are written by the benchmarks, with their date and machine on purpose.
Prints one line per finding, FILE:LINE: what, and exits 1 if there is any.
"""
import glob
import os
import re
import subprocess
import sys

READER_PAGES = ["README.md", "docs/performance.md", "docs/lab.md", "docs/glossary.md"]
TEACHING_PAGES = ["step[0-9][0-9]_*/chapter.md", "docs/concepts-*.md", "docs/soft-roce.md",
                  "docs/troubleshooting.md", "docs/mainpage.md.in"]
HISTORY_PAGE = "docs/maintainers-performance.md"

# What a reader page must not carry, each with what it is.
MAINTAINER_PATTERNS = [
    (re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b"), "a commit hash"),
    (re.compile(r"\bcommit [0-9a-f]{7,40}\b"), "a commit"),
    (re.compile(r"\bctest\b"), "a ctest command"),
    (re.compile(r"--preset[ =](?!default\b)[\w-]+"), "a test preset"),
    (re.compile(r"\blabels?\s+`[\w.-]+`|\s-L\s+\w+"), "a test label"),
    (re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"), "a dated run"),
    (re.compile(r"\b[Ii]ssue \d+\b|\bthe issue that asked\b"), "a project issue"),
    (re.compile(r"^#+\s*For maintainers", re.M), "a maintainers' section"),
]

# Doxygen names that are anchors, not tests: @ref NAME, \ref NAME, {#NAME}, \anchor NAME,
# \snippet FILE NAME. A test that shares its name with an anchor is fine there.
ANCHOR_USE = re.compile(r"(?:[@\\]ref\s+|\{#|\\anchor\s+|\\snippet\s+\S+\s+)([\w.]+)")
REF = re.compile(r"[@\\]ref\s+([\w.]+)")
ANCHOR_DEF = re.compile(r"\{#([\w.]+)\}|\\anchor\s+([\w.]+)")


def test_names(build):
    ctest = os.environ.get("CTEST_COMMAND", "ctest")
    out = subprocess.run([ctest, "-N", "--test-dir", build], capture_output=True, text=True,
                         check=True).stdout
    names = re.findall(r"^\s*Test\s+#\d+: (\S+)$", out, re.M)
    if not names:
        sys.exit(f"reader_path: ctest -N in {build} lists no test")
    return names


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: reader_path.py ROOT BUILD_DIR")
    root, build = sys.argv[1], sys.argv[2]
    tests = test_names(build)
    test_word = re.compile(r"(?<![\w/.-])(" + "|".join(map(re.escape, sorted(tests, key=len,
                                                                               reverse=True)))
                           + r")(?![\w])")
    history_text = open(os.path.join(root, HISTORY_PAGE), encoding="utf-8").read()
    history = {a or b for a, b in ANCHOR_DEF.findall(history_text)}

    findings = []
    teaching = sorted({p for pattern in TEACHING_PAGES
                       for p in glob.glob(os.path.join(root, pattern))})
    reader = [os.path.join(root, p) for p in READER_PAGES]
    for path in reader + teaching:
        text = open(path, encoding="utf-8").read()
        rel = os.path.relpath(path, root)
        if path in reader:
            for pattern, what in MAINTAINER_PATTERNS:
                for m in pattern.finditer(text):
                    findings.append(f"{rel}:{line_of(text, m.start())}: {what}: {m.group(0)!r}")
        # Blank the anchors out (same length), then look for test names.
        prose = ANCHOR_USE.sub(lambda m: " " * len(m.group(0)), text)
        for m in test_word.finditer(prose):
            findings.append(f"{rel}:{line_of(text, m.start())}: the test name {m.group(1)}")
        for m in REF.finditer(text):
            if m.group(1) in history or "history" in m.group(1):
                findings.append(f"{rel}:{line_of(text, m.start())}: a link to the history "
                                f"section {m.group(1)} (link the performance page instead)")
    for f in findings:
        print(f)
    print(f"reader_path: {len(reader) + len(teaching)} pages, {len(tests)} test names, "
          f"{len(history)} history anchors: {len(findings)} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
