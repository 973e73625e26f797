#!/usr/bin/env bash
# step09 is written without std::function, std::future and std::thread (issue 14): no C++ file
# of the step (*.cpp, *.hpp, tests/ included) names them, or their kin (std::promise,
# std::async, std::jthread, ...), or includes <functional>, <future> or <thread>. Comments and
# string literals may name them (the chapter contrasts step09 with rdmapp); code may not. Each
# use fails the test with one line naming the file and the line.
#   tests/no_std_function.sh [DIR]   (default: the step folder that holds this script)
set -uo pipefail
dir=${1:-$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)}
[[ -d $dir ]] || { echo "FAIL: no such folder: $dir" >&2; exit 1; }
/usr/bin/python3 - "$dir" <<'PY'
import pathlib, re, sys

root = pathlib.Path(sys.argv[1]).resolve()
# Comments, raw strings, strings and character literals, blanked before the search (newlines
# kept, so that line numbers stay right).
NOT_CODE = re.compile(r'''//[^\n]*|/\*.*?\*/|R"([^()\\\s]{0,16})\(.*?\)\1"|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*\'''', re.S)
FORBIDDEN = re.compile(
    r'\bstd\s*::\s*(?:function|move_only_function|future|shared_future|promise|packaged_task|'
    r'async|thread|jthread)\b|#\s*include\s*<(?:functional|future|thread)>')
files = sorted(p for p in root.rglob('*') if p.suffix in ('.cpp', '.hpp') and p.is_file())
if not files:
    sys.exit(f'FAIL: no .cpp or .hpp file under {root}')
hits = 0
for path in files:
    text = path.read_text(encoding='utf-8', errors='replace')
    code = NOT_CODE.sub(lambda m: re.sub(r'[^\n]', ' ', m.group()), text)
    original = text.split('\n')
    for number, line in enumerate(code.split('\n'), start=1):
        for match in FORBIDDEN.finditer(line):
            hits += 1
            name = f'{root.name}/{path.relative_to(root)}'
            print(f'FAIL: {name}:{number}: {match.group()}: {original[number - 1].strip()}',
                  file=sys.stderr)
if hits:
    sys.exit(f'FAIL: {hits} use(s) of std::function, std::future or std::thread (or their '
             f'headers) in {root.name}: step09 is one thread with awaiters, none of those')
print(f'PASS: {len(files)} files of {root.name}, no std::function, std::future or std::thread')
PY
