source "$TESTLIB"; require_device; echo TODO
