#!/usr/bin/env bash
# Every step program: --help (and -h) prints the usage on stdout and exits 0; an unknown option
# prints "<program>: ..." naming it, then the usage, on stderr and exits 2 (the contract's table).
# shellcheck source=/dev/null
source "$TESTLIB"
(($# > 0)) || fail "no program given (tests/CMakeLists.txt passes every step program that exists)"
for prog in "$@"; do
    name=${prog##*/}
    for help in --help -h; do
        run_cmd "$name$help" "$prog" "$help"
        expect_exit "$name$help" 0
        expect_match "$name$help" out "^usage: $name "
        [[ ! -s $TEST_TMP/$name$help.err ]] || fail "$name $help: expected nothing on stderr"
    done
    run_cmd "$name-unknown" "$prog" --no-such-option
    expect_exit "$name-unknown" 2
    expect_match "$name-unknown" err "^$name: .*--no-such-option"
    expect_match "$name-unknown" err "^usage: $name "
    [[ ! -s $TEST_TMP/$name-unknown.out ]] || fail "$name --no-such-option: expected nothing on stdout"
    echo "ok: $name"
done
echo "PASS: $# programs"
