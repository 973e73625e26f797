#!/usr/bin/python3
"""tests/step_base_test.py: every tool compares a step with the base its BASE file names.

In a made-up tree of three steps, step01_a, step02_b (BASE step01_a) and
step03_c (BASE step01_a, not the folder before it), it runs the real tools and
checks their exit codes and exact lines:

- tests/carry_forward.py passes when step03_c's carried file equals step01_a's
  copy, though it differs from step02_b's; fails, naming step01_a, when it
  differs from step01_a's and is not listed on docs/maintainers-step03_c.md;
  wants the heading "Files changed since the base step" (not "the previous
  step") where the base is not the folder just before;
- tests/name_drift.py passes when step03_c lacks a name only step02_b defines,
  and fails, naming step01_a, when it drops one of step01_a's;
- tools/step-metrics shows the base and counts step03_c's changes against
  step01_a, in carried files apart from new ones;
- docs/step-diff.sh's HTML names the base;
- a BASE naming a missing folder, a later step, the step itself, or holding
  two lines is an error naming the step and the file, with exit status 1, in
  tests/step_base.py, both tests, tools/step-metrics and docs/step-base.cmake
  (the reader the docs' CMake uses).
"""
import pathlib
import shutil
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
failures = []


def check(what, ok, detail=""):
    if not ok:
        failures.append(f"FAIL: {what}{': ' + detail if detail else ''}")


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def make_tree(root):
    for step in ("step01_a", "step02_b", "step03_c"):
        write(root / step / "main.cpp", "int main() { return helper(); }\n")
        write(root / step / "helper.hpp", "inline int helper() { return 1; }\n")
    write(root / "step01_a" / "common.hpp", "int a = 1;\nint b = 2;\n")
    # step02_b changes common.hpp, says so, and adds a name.
    write(root / "step02_b" / "BASE", "step01_a\n")
    write(root / "step02_b" / "common.hpp", "int a = 1;\nint b = 20;\ninline int only_in_b() { return 2; }\n")
    write(root / "docs" / "maintainers-step02_b.md", "# step02_b: for maintainers {#maint_step02}\n\n"
          "## Files changed since the previous step {#step02_files_changed}\n\n"
          "- `common.hpp`: b is 20, and only_in_b\n")
    # step03_c starts from step01_a: its common.hpp is step01_a's, and it lacks only_in_b.
    write(root / "step03_c" / "BASE", "step01_a\n")
    shutil.copy(root / "step01_a" / "common.hpp", root / "step03_c" / "common.hpp")


def run(args, root):
    p = subprocess.run([str(a) for a in args] + [str(root)], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def tool(name):
    return {"carry_forward": ["/usr/bin/python3", REPO / "tests" / "carry_forward.py"],
            "name_drift": ["/usr/bin/python3", REPO / "tests" / "name_drift.py"],
            "step_base": ["/usr/bin/python3", REPO / "tests" / "step_base.py"],
            "step-metrics": ["/usr/bin/python3", REPO / "tools" / "step-metrics"]}[name]


def expect(name, root, rc, lines, stream="stdout"):
    code, out, err = run(tool(name), root)
    text = out if stream == "stdout" else err
    check(f"{name} exits {rc}", code == rc, f"exit {code}\n{out}{err}")
    for line in lines:
        check(f"{name} prints {line!r}", line in text.splitlines(), f"\n{out}{err}")


def cmake_reader(root):
    p = subprocess.run(["cmake", f"-DROOT={root}", "-P", str(REPO / "docs" / "step-base.cmake")],
                       capture_output=True, text=True)
    return p.returncode, [line.strip() for line in (p.stdout + p.stderr).splitlines()]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        make_tree(root)
        c = root / "step03_c"

        # The declared bases, as Python and CMake read them.
        expect("step_base", root, 0, ["step01_a -", "step02_b step01_a", "step03_c step01_a"])
        code, lines = cmake_reader(root)
        check("step-base.cmake exits 0", code == 0, "\n".join(lines))
        check("step-base.cmake reads step03_c's base", "step03_c step01_a" in lines, "\n".join(lines))

        # Identical to its base's copy, different from step02_b's: nothing to list.
        expect("carry_forward", root, 0, ["carry_forward: 2 steps checked against their base, 0 problems"])
        # step02_b's only_in_b is not step03_c's to lose.
        expect("name_drift", root, 0, ["name_drift: 2 steps checked against their base, 0 problems"])

        # A change against the base, unlisted: named with the base and the heading to use.
        write(c / "common.hpp", "int a = 1;\nint b = 3;\n")
        write(c / "extra.hpp", "// new\nint c = 4;\nint d = 5;\n")
        expect("carry_forward", root, 1, [
            "step03_c: common.hpp differs from step01_a/common.hpp (the base in step03_c/BASE); list it"
            " with a reason under 'Files changed since the base step' in docs/maintainers-step03_c.md",
            "carry_forward: 2 steps checked against their base, 1 problems"])
        # Under "the previous step", which step03_c's base is not: the heading is wrong.
        write(root / "docs" / "maintainers-step03_c.md", "# step03_c {#maint_step03}\n\n## Files changed since the previous step\n\n"
              "- `common.hpp`: b is 3\n")
        expect("carry_forward", root, 1, [
            "step03_c: docs/maintainers-step03_c.md heads a section 'Files changed since the previous step', but"
            " step03_c/BASE names step01_a: head it 'Files changed since the base step'"])
        write(root / "docs" / "maintainers-step03_c.md", "# step03_c {#maint_step03}\n\n## Files changed since the base step\n\n"
              "- `common.hpp`: b is 3\n")
        expect("carry_forward", root, 0, ["carry_forward: 2 steps checked against their base, 0 problems"])

        # The metrics: step03_c against step01_a. All files: 4 added (1 in common.hpp, 3 in
        # extra.hpp), 1 removed; carried files: 1 added, 1 removed; in new: extra.hpp's 3.
        code, out, err = run(tool("step-metrics"), root)
        check("step-metrics exits 0", code == 0, f"exit {code}\n{out}{err}")
        rows = {line.split()[0]: line.split() for line in out.splitlines()[2:] if line.strip()}
        check("step-metrics: step03_c's base and counts",
              rows.get("step03_c", [])[1:2] + rows.get("step03_c", [])[5:12]
              == ["step01", "4", "1", "0", "1", "1", "0", "3"], out)
        check("step-metrics: step01_a has no base", rows.get("step01_a", [])[1:2] == ["-"], out)

        # The docs' diff names the base.
        html = root / "step03_c.html"
        subprocess.run(["bash", str(REPO / "docs" / "step-diff.sh"), str(root), "step01_a", "step03_c",
                        str(html)], check=True)
        check("step-diff.sh names the base",
              '<p class="step-diff-summary">Against its base step, <code>step01_a</code> &rarr;'
              ' <code>step03_c</code>: 4 lines added, 1 removed, 0 moved; of these, in the files both'
              ' steps have, 1 added, 1 removed, 0 moved.</p>' in html.read_text().splitlines(),
              html.read_text())

        # A name of the base dropped: named with the base.
        write(c / "helper.hpp", "inline int helper2() { return 1; }\n")
        expect("name_drift", root, 1, [
            "step03_c: `helper` (defined in step01_a/helper.hpp:1, the base in step03_c/BASE) is no"
            " longer defined; list it under 'Names changed since the base step' on"
            " docs/maintainers-step03_c.md"])

        # Bad bases: each an error naming the step and the file, exit 1, in every reader.
        bad = {"step09_x\n": f"step03_c/BASE: names step09_x, which is not a step folder in {root}",
               "step03_c\n": "step03_c/BASE: names step03_c, which is not an earlier step than step03_c",
               "step01_a\nstep02_b\n": "step03_c/BASE: must hold one line, the name of the step folder"
                                       " step03_c starts from (e.g. step01_a)"}
        bad_later = "step02_b/BASE: names step03_c, which is not an earlier step than step02_b"
        for text, line in bad.items():
            line = line.replace("(e.g. step01_a)", "(e.g. step01_devices)")
            write(c / "BASE", text)
            expect("step_base", root, 1, [line])
            expect("carry_forward", root, 1, [line])
            expect("name_drift", root, 1, [line])
            expect("step-metrics", root, 1, ["step-metrics: " + line], stream="stderr")
            code, lines = cmake_reader(root)
            check(f"step-base.cmake exits 1 for BASE {text!r}", code == 1, "\n".join(lines))
            check(f"step-base.cmake prints {line!r}", line in lines, "\n".join(lines))
        write(c / "BASE", "step01_a\n")
        write(root / "step02_b" / "BASE", "step03_c\n")
        expect("carry_forward", root, 1, [bad_later])
        code, lines = cmake_reader(root)
        check("step-base.cmake: a later base", code == 1 and bad_later in lines, "\n".join(lines))

    for line in failures:
        print(line)
    print(f"step_base_test: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
