#!/usr/bin/python3
"""tests/step_globs.py [ROOT]: every tool that walks the step folders sees step10_* and on.

Step numbers have two digits. A pattern such as step0[1-9]_* would miss step10 and later
without a word, so this test fails two ways:

1. Every step-folder pattern in the project's tools, tests and build files (a shell or Python
   glob, a CMake glob or regex, a grep -E) must match both step01_devices and step10_srq. It
   names the file, the line and the pattern that does not.
2. The tools that list the steps, run on a made-up tree whose steps are step01_a, step09_b,
   step10_c and step12_d, each a one-file program, see all four: step_base.py (which
   tools/step-metrics, carry_forward.py and name_drift.py use), dead_code.py and
   copy_out_build.sh.
The top-level CMakeLists.txt must take every step folder (a glob, not a list of names).
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

# Files that walk the step folders, relative to ROOT (globs).
TOOL_FILES = [".clang-tidy", "CMakeLists.txt", "cmake/*", "docs/*.cmake", "docs/*.sh",
              "docs/CMakeLists.txt", "tests/*.py", "tests/*.sh", "tests/CMakeLists.txt",
              "tools/*", "lab/softroce", "bench/*"]
# "step" followed by a pattern: a character class, or a ? or * wildcard, up to the first "_"
# (or, for a regex such as ^step[0-9]+, its end).
PATTERN = re.compile(r"step((?:\[[^\]]*\]|[0-9?*+])+)(_?)")
SAMPLES = ("step01_devices", "step10_srq")


def as_regex(body):
    """The pattern's digits part, glob or regex, as a Python regex."""
    out, i = "", 0
    while i < len(body):
        c = body[i]
        if c == "[":
            j = body.index("]", i)
            out += "[" + body[i + 1:j].replace("!", "^", 1) + "]"
            i = j + 1
            continue
        out += {"?": ".", "*": ".*", "+": "+"}.get(c, re.escape(c))
        i += 1
    return out


def static_findings(root):
    findings = []
    for pattern in TOOL_FILES:
        for path in sorted(root.glob(pattern)):
            if not path.is_file() or path.name == "step_globs.py":
                continue
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                continue
            for number, line in enumerate(text.splitlines(), 1):
                for m in PATTERN.finditer(line):
                    body, underscore = m.group(1), m.group(2)
                    if not re.search(r"[\[?*]", body) or re.match(r"[0-9]{2}", body):
                        continue  # a plain name such as step04_pingpong, or one step's files
                    regex = re.compile(as_regex(body) + ("_" if underscore else ""))
                    misses = [s for s in SAMPLES if not regex.match(s[4:])]
                    if misses:
                        findings.append(f"{path.relative_to(root)}:{number}: 'step{body}{underscore}' "
                                        f"does not match {', '.join(misses)}")
    top = (root / "CMakeLists.txt").read_text()
    if re.search(r"foreach\(step IN ITEMS step0", top):
        findings.append("CMakeLists.txt: the steps are a list of names: a new step folder is not built")
    return findings


def made_up_tree(tmp):
    tree = pathlib.Path(tmp) / "tree"
    names = ["step01_a", "step09_b", "step10_c", "step12_d"]
    base = None
    for name in names:
        d = tree / name
        d.mkdir(parents=True)
        (d / "main.cpp").write_text("namespace tutorial { int run() { return 0; } }\n"
                                    "int main() { return tutorial::run(); }\n")
        (d / "CMakeLists.txt").write_text(
            f"cmake_minimum_required(VERSION 3.25)\nproject({name} LANGUAGES CXX)\n"
            f"add_executable({name} main.cpp)\n")
        if base:
            (d / "BASE").write_text(base + "\n")
        base = name
    return tree, names


def dynamic_findings(root, tmp):
    tree, names = made_up_tree(tmp)
    findings = []
    sys.path.insert(0, str(root / "tests"))
    import step_base  # noqa: E402
    seen = [p.name for p in step_base.step_dirs(tree)]
    if seen != names:
        findings.append(f"tests/step_base.py: step_dirs saw {seen}, not {names}")
    env = dict(os.environ, JOBS="2")
    runs = {
        "tests/dead_code.py": ([sys.executable, str(root / "tests/dead_code.py"), str(tree)],
                               f"dead_code: {len(names)} steps checked"),
        "tests/copy_out_build.sh": (["bash", str(root / "tests/copy_out_build.sh"), str(tree)],
                                    f"copy-out build: {len(names)} steps build alone"),
    }
    for tool, (cmd, expected) in runs.items():
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if expected not in r.stdout:
            findings.append(f"{tool}: expected the line '{expected}' (exit {r.returncode}):\n"
                            f"{r.stdout}{r.stderr}")
    return findings


def main(argv):
    root = pathlib.Path(argv[1] if len(argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    with tempfile.TemporaryDirectory(prefix="step_globs.") as tmp:
        findings = static_findings(root) + dynamic_findings(root, tmp)
    for f in findings:
        print(f"FAIL: {f}")
    print(f"step_globs: {len(findings)} tools that miss a step folder")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
