#!/usr/bin/env bash
# exercise_unit_fails.sh PROG TEST: the answer to a chapter's exercise, run: PROG, a unit-test
# program built on the step's patched copy, fails TEST (Suite.Name) as the answer says.
# shellcheck source=/dev/null
source "$TESTLIB"
prog=$1 test=$2
run_cmd unit "$prog" --gtest_filter="$test"
expect_exit unit 1
expect_line unit out "[  FAILED  ] $test"
echo PASS
