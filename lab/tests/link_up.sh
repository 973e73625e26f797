#!/usr/bin/env bash
# Host b's link up again (lab/peer link up), after a test that took it down: ctest runs this as
# the fixture cleanup of step04_link_down. Outside the two-host lab there is no link: skip (77).
[[ -n ${LAB_CTL:-} ]] || { echo "SKIP: not in the two-host lab"; exit 77; }
exec "$(dirname -- "${BASH_SOURCE[0]}")/../peer" link up
