#!/usr/bin/python3
"""tests/step_base.py [ROOT]: each step's base step, as its BASE file declares it.

A step folder names the step it starts from in a file BASE beside its
chapter.md: one line holding the base folder's name, e.g. step09_coroutines/BASE
holds "step06_epoll". In Part I (steps 01-06) the base is the previous step;
a Part II step names the core step it branches from. A step without a BASE
file (step01) has no base. carry_forward.py, name_drift.py, tools/step-metrics
and the docs' "What changed" diffs (docs/CMakeLists.txt, through
docs/step-base.cmake, which follows the same rules) all compare a step with
its declared base, never with the folder before it in sort order.

A BASE that is not one step folder name on one line, that names a folder that
does not exist, or that names a step that is not an earlier one (by folder
name, so by number) is an error naming the step and the file. Run as a
script, it prints "STEP BASE" per step ("-" for none), or the errors and
exit status 1.

A step's lists about its base ("Files changed since ...", "Names changed
since ...") live on its page for maintainers, docs/maintainers-STEP.md, not in
the chapter: they are headed "... since the previous step" when the base is the
step folder just before it, and "... since the base step" otherwise.
"""
import pathlib
import re
import sys

BASE_FILE = "BASE"


def step_dirs(root):
    return sorted(p for p in root.glob("step[0-9][0-9]_*") if p.is_dir())


def step_bases(root):
    """[(step, base or None)] for every step folder in ROOT, and a list of
    error lines (empty when every BASE is sound)."""
    steps = step_dirs(root)
    by_name = {s.name: s for s in steps}
    pairs, errors = [], []
    for step in steps:
        declared = step / BASE_FILE
        if not declared.is_file():
            pairs.append((step, None))
            continue
        where = f"{step.name}/{BASE_FILE}"
        text = declared.read_text(encoding="utf-8", errors="replace")
        m = re.fullmatch(r"(step[0-9][0-9]_[A-Za-z0-9_]+)\n?", text)
        name = m.group(1) if m else ""
        if not m:
            errors.append(f"{where}: must hold one line, the name of the step folder {step.name}"
                          f" starts from (e.g. step01_devices)")
        elif name not in by_name:
            errors.append(f"{where}: names {name}, which is not a step folder in {root}")
        elif name >= step.name:
            errors.append(f"{where}: names {name}, which is not an earlier step than {step.name}")
        else:
            pairs.append((step, by_name[name]))
            continue
        pairs.append((step, None))
    return pairs, errors


def since(step, base, steps):
    """How STEP's maintainers' page names its base in a heading: "the previous step"
    when BASE is the step folder just before STEP, else "the base step"."""
    k = steps.index(step)
    return "the previous step" if k > 0 and steps[k - 1] == base else "the base step"


def page_section(page, title):
    """The lines of the sections headed TITLE in the markdown file PAGE (None when there is none)."""
    if not page.is_file():
        return None
    lines = page.read_text(encoding="utf-8").splitlines()
    body = None
    for k, line in enumerate(lines):
        m = re.match(r"^(#{1,6})\s+" + re.escape(title) + r"\s*(?:\{#[^}]*\})?\s*#*\s*$", line)
        if m:
            level = len(m.group(1))
            body = body or []
            for rest in lines[k + 1:]:
                h = re.match(r"^(#{1,6})\s", rest)
                if h and len(h.group(1)) <= level:
                    break
                body.append(rest)
    return body


def maint_page(step):
    """STEP's page for maintainers, relative to the repository: where its lists live."""
    return f"docs/maintainers-{step.name}.md"


def base_section(step, base, steps, what):
    """The lines of the section "WHAT since the previous step" or "WHAT since
    the base step" on STEP's page for maintainers, whichever since() asks for,
    and an error line for each section headed in the other wording."""
    page = step.parent / maint_page(step)
    wanted = since(step, base, steps)
    errors = []
    for other in ("the previous step", "the base step"):
        if other != wanted and page_section(page, f"{what} since {other}") is not None:
            errors.append(f"{step.name}: {maint_page(step)} heads a section '{what} since {other}', but"
                          f" {step.name}/{BASE_FILE} names {base.name}: head it '{what} since {wanted}'")
    return page_section(page, f"{what} since {wanted}") or [], errors


def main(argv):
    root = pathlib.Path(argv[1] if len(argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    pairs, errors = step_bases(root)
    for line in errors:
        print(line)
    if errors:
        return 1
    for step, base in pairs:
        print(step.name, base.name if base else "-")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
