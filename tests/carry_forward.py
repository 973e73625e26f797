#!/usr/bin/python3
"""tests/carry_forward.py [ROOT]: a carried file is the previous step's copy, or the chapter says why not.

For each step folder ROOT/step0[1-9]_*/ after the first, every source file
(*.cpp, *.hpp; not tests/) that exists in both the previous step and this one,
except main.cpp (the lesson), must be byte-identical, or be listed in this
step's chapter.md in a section headed "Files changed since the previous step"
(any heading level), one list item per file, the name in backticks and a
one-line reason:

    ## Files changed since the previous step {#step05_files_changed}
    - `options.hpp`: adds -s and -n, which the ping-pong needs

It fails both ways, naming the step and the file: a carried file that changed
and is not listed, and a listed file that did not change or is not in both
steps.
"""
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from name_drift import chapter_section, step_dirs  # noqa: E402  (one parser for both tests)


def source_names(step):
    return {p.name for p in step.iterdir() if p.is_file() and p.suffix in (".cpp", ".hpp")}


def main(argv):
    root = pathlib.Path(argv[1] if len(argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    steps = step_dirs(root)
    if len(steps) < 2:
        print(f"carry_forward: fewer than two steps in {root}")
        return 0
    errors = 0
    for previous, step in zip(steps, steps[1:]):
        tag = step.name
        carried = sorted((source_names(previous) & source_names(step)) - {"main.cpp"})
        changed = {name for name in carried
                   if (previous / name).read_bytes() != (step / name).read_bytes()}
        listed = {}
        for line in chapter_section(step / "chapter.md", "Files changed since the previous step") or []:
            if not re.match(r"^\s*[-*]\s", line):
                continue
            m = re.match(r"^\s*[-*]\s+`([^`]+)`\s*:\s*\S", line)
            if not m:
                print(f"{tag}: chapter.md: not a '- `file`: reason' item: {line.strip()}")
                errors += 1
                continue
            listed[m.group(1)] = line.strip()
        for name in sorted(changed - set(listed)):
            print(f"{tag}: {name} differs from {previous.name}/{name}; list it with a reason under"
                  f" 'Files changed since the previous step' in {tag}/chapter.md")
            errors += 1
        for name in sorted(set(listed) - changed):
            if name in carried:
                why = f"is identical to {previous.name}/{name}"
            elif name == "main.cpp":
                why = "is the lesson, not a carried file"
            else:
                why = f"is not in both {previous.name} and {tag}"
            print(f"{tag}: chapter.md lists {name} as changed, but it {why}")
            errors += 1
    print(f"carry_forward: {len(steps) - 1} step pairs checked, {errors} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
