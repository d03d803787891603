#!/usr/bin/env bash
# Tests tests/support/no_leftovers: a test that leaves a process running (in the
# background, or double-forked into its own session) fails, naming it, and the process is
# killed; a test that cleans up passes with its own exit status.
#   usage: test_no_leftovers.sh NO_LEFTOVERS_BIN
set -u
wrap=$1
failures=0
check() {  # description, wanted exit code, wanted text in stderr ('' for none), command...
  local what=$1 want=$2 text=$3
  shift 3
  local err rc
  err=$("$wrap" "$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -ne "$want" ] || { [ -n "$text" ] && ! grep -q -- "$text" <<<"$err"; }; then
    echo "FAIL: $what: exit $rc (want $want), stderr: $err" >&2
    failures=$((failures + 1))
  fi
}
marker="no-leftovers-$$"
check "a clean test passes" 0 "" sh -c 'exit 0'
check "its exit status is kept" 3 "" sh -c 'exit 3'
check "a child that ends within the grace is no leftover" 0 "" sh -c 'sleep 1 & exit 0'
check "a background child fails the test" 1 "left 1 process running" bash -c "exec -a $marker-a sleep 60 & exit 0"
check "a double fork into a new session is caught" 1 "left process" bash -c "setsid bash -c 'exec -a $marker-b sleep 60' & exit 0"
check "a command that cannot start is exit 127" 127 "" /nonexistent/binary
sleep 0.2
if pgrep -f "$marker" >/dev/null; then
  echo "FAIL: a leftover process was not killed: $(pgrep -af "$marker")" >&2
  pkill -9 -f "$marker"
  failures=$((failures + 1))
fi
[ "$failures" -eq 0 ] && echo "no_leftovers: all cases pass"
exit "$failures"
