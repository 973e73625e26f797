#!/usr/bin/python3
"""tests/dead_code.py [ROOT [STEP...]]: a step carries only what it runs.

For each step folder ROOT/step[0-9][0-9]_*/ (or the STEPs named), it builds the
step's program the way the linker sees it, and reports every function of
namespace `tutorial` that main() can never reach. The step's program is every
*.cpp in the folder (not tests/: calls from tests do not count), plus one
translation unit for each of the step's headers that no *.cpp includes, so a
header nobody includes is still looked at.

How: GCC compiles each file with -O0 -fno-inline (no call is folded away),
-fkeep-inline-functions and -fkeep-static-functions (every inline, in-class
and file-local function is emitted, called or not) and -ffunction-sections
(one section per function); the linker then links the program with
--gc-sections, keeping only the sections reachable from the entry point and
the static initialisers. A function that some object file defines and that
the linked program no longer has is unreachable from main(). The real
program's flags do not matter: this reads the call graph, not the code.

What it reports, naming the step, the file, the line and the function:
  - a function at namespace scope (in `tutorial`, or its anonymous namespace)
    that nothing reachable calls or takes the address of;
  - a class none of whose member functions is reachable.
A member function of a class the program does use is listed only with
--members (not a failure): a class's surface is designed as a whole, and
what such a member calls counts as reached (--strict: it does not).
Overloads, constructor variants and template instantiations count as one
function: it is reachable when any of them is.

Not seen: a template that is never instantiated (nothing is emitted for it),
and a function reached only through a virtual table that is itself reached.

A finding listed in ALLOWED (below, each with its reason) is not reported; an
entry that no longer matches anything fails, so the list only shrinks.

Exit status 1 when a step has an unreachable function, 0 otherwise; 2 when a
step does not build. Set CXX for the compiler (g++ by default) and JOBS for
parallel compilations (2 by default).
"""
import concurrent.futures
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

# Known and accepted: (steps, functions or classes as printed, reason). Keep it short; every
# entry needs a reason, and an entry that no longer matches is itself a failure.
ALLOWED = [
]

FLAGS = ["-std=c++20", "-O0", "-g1", "-fno-inline", "-fkeep-inline-functions",
         "-fkeep-static-functions", "-ffunction-sections", "-w"]
# A function of namespace tutorial (optionally const/volatile/ref-qualified); not a local
# entity (_ZZ: lambdas and statics inside a function, dead or alive with it).
OURS = re.compile(r"^_ZN[KVRO]*8tutorial")


def pkg_config(*args):
    try:
        # librdmacm: step08's connection manager.
        out = subprocess.run(["pkg-config", *args, "libibverbs", "librdmacm"], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    return out.split()


def strip_templates(name):
    """The name without template arguments: f<int>::g<x> -> f::g (operator names kept)."""
    out, depth, k = [], 0, 0
    while k < len(name):
        if name.startswith("operator", k) and depth == 0:
            out.append(name[k:])
            break
        c = name[k]
        if c == "<":
            depth += 1
        elif c == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(c)
        k += 1
    return re.sub(r"\[abi:\w+\]", "", "".join(out))


def split_scope(name):
    """('tutorial::A', 'f') for 'tutorial::A::f', at the last top-level '::'."""
    depth, last = 0, -1
    for k, c in enumerate(name):
        if c in "<(":
            depth += 1
        elif c in ">)" and depth:
            depth -= 1
        elif depth == 0 and name.startswith("::", k) and not name.startswith("operator", last + 2):
            last = k
    return (name[:last], name[last + 2:]) if last >= 0 else ("", name)


def demangle(names):
    if not names:
        return []
    out = subprocess.run(["c++filt", "-p"], input="\n".join(names) + "\n", check=True,
                         capture_output=True, text=True).stdout
    return out.splitlines()


def symbols(path, with_lines):
    """Defined text symbols of an object file or program: {mangled: 'file:line' or ''}."""
    args = ["nm", "--defined-only"] + (["-l"] if with_lines else []) + [str(path)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) >= 3 and parts[1] in "tTwW":
            found[parts[2]] = parts[3].strip() if len(parts) > 3 else ""
    return found


def compile_one(cxx, flags, source, obj):
    run = subprocess.run([cxx, *flags, "-MD", "-MF", str(obj) + ".d", "-c", str(source), "-o", str(obj)],
                         capture_output=True, text=True)
    return run.returncode, run.stderr


def included_headers(dep_file, step):
    text = pathlib.Path(dep_file).read_text().replace("\\\n", " ")
    deps = text.split(":", 1)[1].split() if ":" in text else []
    return {pathlib.Path(d).resolve() for d in deps
            if pathlib.Path(d).suffix == ".hpp" and pathlib.Path(d).resolve().parent == step.resolve()}


def build(step, work, pool, cxx):
    """Link the step's program with --gc-sections; (objects, program) or raise RuntimeError."""
    flags = FLAGS + ["-I", str(step)] + pkg_config("--cflags")
    sources = sorted(step.glob("*.cpp"))

    def run_all(units):
        jobs = [(src, work / (src.name + ".o")) for src in units]
        for (src, obj), (rc, err) in zip(jobs, pool.map(lambda j: compile_one(cxx, flags, *j), jobs)):
            if rc:
                raise RuntimeError(f"{step.name}: {src.name} does not compile:\n{err}")
        return [obj for _, obj in jobs]

    objects = run_all(sources)
    seen = set()
    for obj in objects:
        seen |= included_headers(str(obj) + ".d", step)
    lonely = []
    for header in sorted(step.glob("*.hpp")):
        if header.resolve() not in seen:  # a header no program file includes: its own unit
            unit = work / (header.name + ".cpp")
            unit.write_text(f'#include "{header.name}"\n')
            lonely.append(unit)
    objects += run_all(lonely)
    return objects, [u.name[:-4] for u in lonely]


def link(step, work, objects, cxx, roots=()):
    """The program linked with --gc-sections, ROOTS (mangled names) kept as if called from main."""
    program = work / step.name
    rootfile = work / "roots.txt"
    rootfile.write_text("".join(f"-Wl,--undefined={r}\n" for r in roots))
    run = subprocess.run([cxx, "-o", str(program), *map(str, objects), f"@{rootfile}",
                          "-Wl,--gc-sections", *pkg_config("--libs"), "-pthread"],
                         capture_output=True, text=True)
    if run.returncode:
        raise RuntimeError(f"{step.name}: the program does not link:\n{run.stderr}")
    return {strip_templates(n) for n in demangle([s for s in symbols(program, False) if OURS.match(s)])}


def where(location, step):
    """'file.hpp:12' for a path inside the step (the first definition's place)."""
    m = re.match(r"(.*):(\d+)$", location)
    if not m:
        return "?"
    path = pathlib.Path(m.group(1))
    try:
        return f"{path.resolve().relative_to(step.resolve())}:{m.group(2)}"
    except ValueError:
        return f"{path}:{m.group(2)}"


def place_key(place):
    """Sort places by file, then line as a number; an unknown place last."""
    m = re.match(r"(.*):(\d+)$", place)
    return (m.group(1), int(m.group(2))) if m else ("~", 0)


STRICT = False  # --strict: no second link; what only unused members of used classes call is reported


def is_namespace(scope):
    return scope == "tutorial" or scope.endswith("(anonymous namespace)")


def in_classes(name, classes):
    scope = split_scope(name)[0]
    return not is_namespace(scope) and any(scope == c or scope.startswith(c + "::") for c in classes)


def analyse(step, work, objects, cxx):
    """(dead free functions, dead classes, dead members of live classes): lists of (where, name).

    Two links. The first keeps what main() reaches: a class with a reachable member function
    is used. The second also keeps every member function of a used class, so that what an
    unused member of a used class calls is not reported: the class's surface is one unit.
    """
    defined = {}
    for obj in objects:
        for sym, loc in symbols(obj, True).items():
            if OURS.match(sym) and (sym not in defined or not defined[sym]):
                defined[sym] = loc
    keys = dict(zip(defined, (strip_templates(n) for n in demangle(list(defined)))))
    functions = {}  # function name (templates stripped) -> first place defined
    for sym, key in keys.items():
        place = where(defined[sym], step)
        if key not in functions or place_key(place) < place_key(functions[key]):
            functions[key] = place
    alive = link(step, work, objects, cxx)
    used = {split_scope(n)[0] for n in alive if not is_namespace(split_scope(n)[0])}
    roots = sorted(sym for sym, key in keys.items() if key not in alive and in_classes(key, used))
    alive_too = link(step, work, objects, cxx, roots) if roots and not STRICT else alive
    free, classes, members = [], {}, []
    for name, place in functions.items():
        scope = split_scope(name)[0]
        if name not in alive and in_classes(name, used):
            members.append((place, name))
        elif name in alive_too:
            continue
        elif is_namespace(scope):
            free.append((place, name))
        else:
            classes.setdefault(scope, []).append((place, name))
    # A class is dead when it has a member function of its own (not a constructor, destructor
    # or operator, which a class used only as data also has) and none of them is reachable.
    dead_classes = []
    for scope, ms in classes.items():
        short = split_scope(scope)[1]
        own = [n for _, n in ms if split_scope(n)[1] not in (short, "~" + short)
               and not split_scope(n)[1].startswith("operator")]
        if own:
            dead_classes.append((min((p for p, _ in ms), key=place_key), scope))
    by_place = lambda f: (place_key(f[0]), f[1])  # noqa: E731
    return sorted(free, key=by_place), sorted(dead_classes, key=by_place), sorted(members, key=by_place)


def allowed(step, name):
    return any(step in steps and name in names for steps, names, _ in ALLOWED)


def stale_allowances(step, found):
    """Allow-list entries for STEP that match nothing it reports."""
    return sorted(n for steps, names, _ in ALLOWED if step in steps for n in names if n not in found)


def main(argv):
    global STRICT
    show_members = "--members" in argv
    STRICT = "--strict" in argv
    args = [a for a in argv[1:] if a not in ("--members", "--strict")]
    root = pathlib.Path(args[0] if args else pathlib.Path(__file__).resolve().parent.parent)
    steps = sorted(p for p in root.glob("step[0-9][0-9]_*") if p.is_dir())
    if len(args) > 1:
        steps = [s for s in steps if s.name in args[1:]]
    cxx = os.environ.get("CXX") or shutil.which("g++") or "c++"
    problems = 0
    with tempfile.TemporaryDirectory(prefix="dead_code.") as tmp, \
            concurrent.futures.ThreadPoolExecutor(int(os.environ.get("JOBS", "2"))) as pool:
        for step in steps:
            work = pathlib.Path(tmp) / step.name
            work.mkdir()
            try:
                objects, lonely = build(step, work, pool, cxx)
                free, classes, members = analyse(step, work, objects, cxx)
            except RuntimeError as e:
                print(e)
                return 2
            for header in lonely:
                print(f"{step.name}: {header}: no program file includes it")
            for place, name in free:
                if not allowed(step.name, name):
                    print(f"{step.name}: {place}: {name}() is unreachable from main()")
                    problems += 1
            for place, name in classes:
                if not allowed(step.name, name):
                    print(f"{step.name}: {place}: class {name}: no member function is reachable from main()")
                    problems += 1
            for name in stale_allowances(step.name, {n for _, n in free + classes}):
                print(f"{step.name}: {name} is allowed in tests/dead_code.py but is no longer "
                      f"unreachable (or gone): remove it from ALLOWED")
                problems += 1
            if show_members:
                for place, name in members:
                    print(f"{step.name}: {place}: member {name}() is unreachable (not a failure)")
    print(f"dead_code: {len(steps)} steps checked, {problems} unreachable functions or classes")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
