#!/usr/bin/python3
"""tests/carry_forward.py [ROOT]: a carried file is the base step's copy, or the step's page for maintainers says why not.

For each step folder ROOT/step[0-9][0-9]_*/ that declares a base step in its BASE
file (tests/step_base.py: in Part I the previous step, in Part II the core step
it branches from), every source file (*.cpp, *.hpp; not tests/) that exists in
both the base step and this one, except main.cpp (the lesson), must be
byte-identical, or be listed on this step's docs/maintainers-STEP.md in a section headed
"Files changed since the previous step" (any heading level; "since the base
step" where the base is not the step just before), one list item per file,
the name in backticks and a one-line reason:

    ## Files changed since the previous step {#step05_files_changed}
    - `options.hpp`: adds -s and -n, which the ping-pong needs

It fails both ways, naming the step and the file: a carried file that changed
and is not listed, and a listed file that did not change or is not in both
steps. A BASE that names no earlier step folder fails, naming the step and the
file; a step without BASE (step01) has no base and is not checked.
"""
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from step_base import base_section, maint_page, since, step_bases, step_dirs  # noqa: E402  (one reader for every tool)


def source_names(step):
    return {p.name for p in step.iterdir() if p.is_file() and p.suffix in (".cpp", ".hpp")}


def main(argv):
    root = pathlib.Path(argv[1] if len(argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    steps = step_dirs(root)
    pairs, errors_found = step_bases(root)
    for line in errors_found:
        print(line)
    errors = len(errors_found)
    checked = 0
    for step, base in pairs:
        if base is None:
            continue
        checked += 1
        tag = step.name
        title = f"Files changed since {since(step, base, steps)}"
        carried = sorted((source_names(base) & source_names(step)) - {"main.cpp"})
        changed = {name for name in carried
                   if (base / name).read_bytes() != (step / name).read_bytes()}
        listed = {}
        section, heading_errors = base_section(step, base, steps, "Files changed")
        for line in heading_errors:
            print(line)
            errors += 1
        for line in section:
            if not re.match(r"^\s*[-*]\s", line):
                continue
            m = re.match(r"^\s*[-*]\s+`([^`]+)`\s*:\s*\S", line)
            if not m:
                print(f"{tag}: {maint_page(step)}: not a '- `file`: reason' item: {line.strip()}")
                errors += 1
                continue
            listed[m.group(1)] = line.strip()
        for name in sorted(changed - set(listed)):
            print(f"{tag}: {name} differs from {base.name}/{name} (the base in {tag}/BASE); list it with"
                  f" a reason under '{title}' in {maint_page(step)}")
            errors += 1
        for name in sorted(set(listed) - changed):
            if name in carried:
                why = f"is identical to {base.name}/{name}"
            elif name == "main.cpp":
                why = "is the lesson, not a carried file"
            else:
                why = f"is not in both {base.name} and {tag}"
            print(f"{tag}: {maint_page(step)} lists {name} as changed, but it {why}")
            errors += 1
    print(f"carry_forward: {checked} steps checked against their base, {errors} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
