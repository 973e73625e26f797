#!/usr/bin/python3
"""tests/name_drift.py [ROOT]: names keep the name of the step that introduced them.

For each step folder ROOT/step[0-9][0-9]_*/ that declares a base step in its BASE
file (tests/step_base.py: in Part I the previous step, in Part II the core step
it branches from), the names of functions, types, constants (constexpr or const variables at
namespace scope), enumerators and data members that the base step's sources
(*.cpp, *.hpp; not tests/) define and this step's no longer define must be
listed on this step's docs/maintainers-STEP.md, in a section headed "Names changed since the
previous step" (any heading level; "since the base step" where the base is not
the step just before):

    ## Names changed since the previous step {#step05_names}
    - `format_gid` → `gid_to_string`: reason on one line
    - `print_devices` removed: reason on one line

It fails, naming the step and the names, when a name disappears without being
listed, when a listed old name did not disappear, and when a rename's new name
is not defined by the step. Names are unqualified: a free function that moves
into a class under the same name keeps its name. main, run, operators,
constructors and destructors are not counted. A BASE that names no earlier
step folder fails, naming the step and the file; a step without BASE (step01)
has no base and is not checked.

The scanner below (also used by tools/step-metrics) reads C++ without a
compiler: it blanks comments, literals and preprocessor lines, then matches
braces, and classifies each brace opened at namespace or class scope as a
namespace, a class, an enum, a function body or an initialiser.
"""
import bisect
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from step_base import base_section, maint_page, since, step_bases, step_dirs  # noqa: E402  (one reader for every tool)

IGNORED = {"main", "run"}
NOT_FUNCTIONS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype",
                 "alignas", "alignof", "static_assert", "noexcept", "requires", "defined"}


def blank(text):
    """The text with comments, string and character literals and preprocessor
    lines replaced by spaces; newlines (and so line numbers) are kept."""
    out = list(text)
    i, n = 0, len(text)
    line_start = True

    def wipe(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if line_start and c in " \t":
            i += 1
            continue
        if line_start and c == "#":  # a directive, with its continuation lines
            j = i
            while j < n and text[j] != "\n":
                if text[j] == "\\" and j + 1 < n and text[j + 1] == "\n":
                    j += 1
                j += 1
            wipe(i, j)
            i = j
            continue
        line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            wipe(i, j)
            i = j
        elif c == '"':
            m = re.compile(r'R"([^()\\ ]{0,16})\(').match(text, i - 1) if i and text[i - 1] == "R" else None
            if m:
                end = text.find(")" + m.group(1) + '"', m.end())
                j = n if end < 0 else end + len(m.group(1)) + 2
            else:
                j = i + 1
                while j < n and text[j] != '"' and text[j] != "\n":
                    j += 2 if text[j] == "\\" else 1
                j += 1
            wipe(i + 1, j - 1)
            i = j
        elif c == "'":
            prev = text[i - 1] if i else " "
            if prev.isalnum() or prev == "_":
                # a digit separator (1'000), unless a u8/u/U/L prefix
                k = i - 1
                while k >= 0 and (text[k].isalnum() or text[k] == "_"):
                    k -= 1
                if text[k + 1:i] not in ("u8", "u", "U", "L"):
                    i += 1
                    continue
            j = i + 1
            while j < n and text[j] != "'" and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            wipe(i + 1, j)
            i = j + 1
        else:
            i += 1
    return "".join(out)


def _skip_angles(h, i):
    """Index after the <...> that starts at h[i]."""
    depth = 0
    while i < len(h):
        if h[i] == "<":
            depth += 1
        elif h[i] == ">":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def _clean_header(h):
    h = " ".join(h.split())
    h = re.sub(r"\[\[.*?\]\]", " ", h)
    while True:
        h = h.strip()
        m = re.match(r"(public|private|protected)\s*:(?!:)", h)
        if m:
            h = h[m.end():]
            continue
        m = re.match(r"template\s*<", h)
        if m:
            h = h[_skip_angles(h, m.end() - 1):]
            continue
        return h


def _matching(h, i, open_c, close_c):
    depth = 0
    for k in range(i, len(h)):
        if h[k] == open_c:
            depth += 1
        elif h[k] == close_c:
            depth -= 1
            if depth == 0:
                return k
    return -1


FUNC_TAIL = re.compile(r"^\s*(?:(?:const|volatile|noexcept|override|final|mutable|&&|&|try)\b\s*"
                       r"|noexcept\s*\([^)]*\)\s*|->\s*[^=;{}]+?\s*)*$")
CLASS_HEAD = re.compile(r"^(?:typedef\s+)?(class|struct|union)\s+(?:alignas\s*\([^)]*\)\s*)?"
                        r"([A-Za-z_]\w*(?:\s*::\s*\w+)*)?\s*(?:final\s*)?(?::[^{}();]*)?$")
ENUM_HEAD = re.compile(r"^(?:typedef\s+)?enum\s+(?:class\s+|struct\s+)?([A-Za-z_]\w*)?\s*(?::[^{}();]*)?$")
NAME_END = re.compile(r"(~?\s*[A-Za-z_]\w*(?:\s*<[^()]*>)?(?:\s*::\s*~?\s*[A-Za-z_]\w*)*)\s*$")


def classify(header):
    """('namespace'|'class'|'enum'|'function'|'init', name) for the text before a '{'."""
    h = _clean_header(header)
    if re.match(r"(?:inline\s+)?namespace\b", h) or re.match(r'extern\s*"[^"]*"\s*$', h):
        return "namespace", ""
    h = re.sub(r'^extern\s*"[^"]*"\s*', "", h)
    m = CLASS_HEAD.match(h)
    if m:
        return "class", (m.group(2) or "").replace(" ", "")
    m = ENUM_HEAD.match(h)
    if m:
        return "enum", m.group(1) or ""
    op = re.search(r"\boperator\b", h)
    paren = h.find("(", op.end() + (2 if h[op.end():].lstrip().startswith("()") else 0)) if op else h.find("(")
    if paren < 0:
        return "init", ""
    close = _matching(h, paren, "(", ")")
    if close < 0:
        return "init", ""
    name_part = h[:paren].rstrip()
    tail = h[close + 1:]
    is_body = bool(FUNC_TAIL.match(tail)) or (
        re.match(r"^\s*(?:noexcept\s*)?:(?!:)", tail) is not None and h.rstrip()[-1:] in ")}")
    if not is_body:
        return "init", ""
    if op:
        return "function", "operator"
    if name_part.endswith("]"):  # a lambda at namespace scope: auto f = [..](..) {
        m = re.search(r"([A-Za-z_]\w*)\s*=\s*\[[^\]]*\]$", name_part)
        return ("function", m.group(1)) if m else ("init", "")
    m = NAME_END.search(name_part)
    if not m:
        return "init", ""
    name = re.sub(r"<[^()]*>", "", m.group(1)).replace(" ", "")
    if name.split("::")[-1] in NOT_FUNCTIONS or "=" in name_part:
        return "init", ""
    return "function", name


def scan(text):
    """Definitions in a C++ source: a list of dicts with kind ('function' or
    'type'), name (unqualified), qualified (with classes), first and last line,
    and ctor (True for constructors and destructors)."""
    code = blank(text)
    newlines = [k for k, c in enumerate(code) if c == "\n"]

    def line_of(pos):
        return bisect.bisect_left(newlines, pos) + 1

    def close_of(pos):
        depth = 0
        for k in range(pos, len(code)):
            if code[k] == "{":
                depth += 1
            elif code[k] == "}":
                depth -= 1
                if depth == 0:
                    return k
        return len(code) - 1

    found = []
    scopes = []  # (kind, name) of each namespace/class brace we are in
    header_start = 0
    extra = ""  # initialisers skipped inside the current header
    i = 0
    while i < len(code):
        c = code[i]
        if c == ";":
            stmt = _clean_header(extra + code[header_start:i])
            m = re.match(r"using\s+([A-Za-z_]\w*)\s*=", stmt) or re.match(
                r"typedef\b.*?\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?$", stmt)
            if m:
                found.append(dict(kind="type", name=m.group(1), qualified=_qualify(scopes, m.group(1)),
                                  first=line_of(i), last=line_of(i), ctor=False))
            else:
                in_class = bool(scopes) and scopes[-1][0] == "class"
                for name in declared_variables(stmt, in_class):
                    found.append(dict(kind="variable", name=name, qualified=_qualify(scopes, name),
                                      first=line_of(i), last=line_of(i), ctor=False))
            header_start, extra = i + 1, ""
        elif c == "}":
            if scopes:
                scopes.pop()
            header_start, extra = i + 1, ""
        elif c == "{":
            header = extra + code[header_start:i]
            kind, name = classify(header)
            if kind in ("namespace", "class"):
                scopes.append((kind, name))
                if kind == "class" and name:
                    short = name.split("::")[-1]
                    found.append(dict(kind="type", name=short, qualified=_qualify(scopes[:-1], name),
                                      first=line_of(i), last=line_of(close_of(i)), ctor=False))
                header_start, extra = i + 1, ""
            elif kind in ("enum", "function"):
                end = close_of(i)
                if kind == "enum" and name:
                    found.append(dict(kind="type", name=name, qualified=_qualify(scopes, name),
                                      first=line_of(i), last=line_of(end), ctor=False))
                if kind == "enum":
                    for enumerator in enumerators(code[i + 1:end]):
                        found.append(dict(kind="enumerator", name=enumerator,
                                          qualified=_qualify(scopes, enumerator),
                                          first=line_of(i), last=line_of(end), ctor=False))
                if kind == "function":
                    parts = name.split("::")
                    short = parts[-1]
                    owner = parts[-2] if len(parts) > 1 else (
                        scopes[-1][1].split("::")[-1] if scopes and scopes[-1][0] == "class" else "")
                    ctor = short.lstrip("~") == owner and owner != ""
                    found.append(dict(kind="function", name=short, qualified=_qualify(scopes, name),
                                      first=line_of(i), last=line_of(end), ctor=ctor))
                i = end
                header_start, extra = end + 1, ""
                if kind == "enum":  # enum X {...} var; : the rest is a declaration
                    header_start, extra = i + 1, "enum{}"
            else:  # an initialiser: part of the header, not a boundary
                end = close_of(i)
                extra = header + "{}"
                header_start = end + 1
                i = end
        i += 1
    return found


def _split_top(text, sep=","):
    """text split at sep outside (), <>, [] and {}."""
    parts, depth, start = [], 0, 0
    for k, c in enumerate(text):
        if c in "(<[{":
            depth += 1
        elif c in ")>]}":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[start:k])
            start = k + 1
    parts.append(text[start:])
    return parts


def enumerators(body):
    """The enumerator names in an enum's body."""
    names = []
    for part in _split_top(body):
        m = re.match(r"\s*([A-Za-z_]\w*)", part)
        if m:
            names.append(m.group(1))
    return names


VARIABLE_SKIP = re.compile(r"^(?:using|typedef|friend|static_assert|return|template|enum|class|struct|"
                           r"union|namespace|extern\s*\"|operator)\b")


def declared_variables(stmt, in_class):
    """The variables a declaration statement (without its ';') declares: every data member of a
    class, and at namespace scope the constants (constexpr or const)."""
    if not stmt or VARIABLE_SKIP.match(stmt):
        return []
    if not in_class and not re.search(r"\b(?:constexpr|const)\b", stmt.split("=")[0]):
        return []
    declarators = _split_top(stmt)
    first = declarators[0]
    # the first declarator carries the type: "std::uint64_t a = 0" -> its last name before = { [
    head = re.split(r"=|\{|\[", first, maxsplit=1)[0]
    if "(" in head:  # a function declaration, or a member function pointer: not counted
        return []
    names = []
    m = re.search(r"([A-Za-z_]\w*)\s*$", head)
    if not m or m.start() == 0:  # a lone word is no declaration
        return []
    names.append(m.group(1))
    for extra in declarators[1:]:
        m = re.match(r"\s*[*&]*\s*([A-Za-z_]\w*)\s*(?:=|\{|\[|$)", extra)
        if m:
            names.append(m.group(1))
    return names


def _qualify(scopes, name):
    classes = [s[1] for s in scopes if s[0] == "class" and s[1]]
    return "::".join(classes + [name])


def sources(step):
    return sorted(p for p in step.iterdir() if p.is_file() and p.suffix in (".cpp", ".hpp"))


def defined_names(step):
    names = {}
    for src in sources(step):
        for d in scan(src.read_text(encoding="utf-8", errors="replace")):
            if d["ctor"] or d["name"] in IGNORED or d["name"] == "operator" or not d["name"]:
                continue
            names.setdefault(d["name"], f"{src.name}:{d['first']}")
    return names


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
        title = f"Names changed since {since(step, base, steps)}"
        old, new = defined_names(base), defined_names(step)
        gone = sorted(set(old) - set(new))
        section, heading_errors = base_section(step, base, steps, "Names changed")
        for line in heading_errors:
            print(line)
            errors += 1
        renamed, removed, bad = {}, set(), []
        for line in section:
            if not re.match(r"^\s*[-*]\s", line):
                continue
            m = re.match(r"^\s*[-*]\s+`([^`]+)`\s*(?:→|->)\s*`([^`]+)`\s*:\s*\S", line)
            if m:
                renamed[m.group(1)] = m.group(2)
                continue
            m = re.match(r"^\s*[-*]\s+`([^`]+)`\s+removed\s*:\s*\S", line)
            if m:
                removed.add(m.group(1))
                continue
            bad.append(line.strip())
        listed = set(renamed) | removed
        tag = step.name
        for line in bad:
            print(f"{tag}: {maint_page(step)}: not a '`old` → `new`: reason' or '`old` removed: reason' item: {line}")
            errors += 1
        for name in gone:
            if name not in listed:
                print(f"{tag}: `{name}` (defined in {base.name}/{old[name]}, the base in {tag}/BASE) is no"
                      f" longer defined; list it under '{title}' on {maint_page(step)}")
                errors += 1
        for name in sorted(listed):
            if name not in old:
                print(f"{tag}: {maint_page(step)} lists `{name}`, which {base.name} does not define")
                errors += 1
            elif name in new:
                print(f"{tag}: {maint_page(step)} lists `{name}` as changed, but {tag} still defines it ({new[name]})")
                errors += 1
        for name, target in sorted(renamed.items()):
            if target not in new:
                print(f"{tag}: {maint_page(step)} renames `{name}` to `{target}`, which {tag} does not define")
                errors += 1
    print(f"name_drift: {checked} steps checked against their base, {errors} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
