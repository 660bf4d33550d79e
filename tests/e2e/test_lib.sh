#!/bin/bash
# The test library of lib.sh checks itself, each helper in a child test that sources it:
#   - check counts a passing and a failing command, goes on after the failure, shows the
#     failing command's output, and the test ends non-zero with the counts printed;
#   - a test whose checks all pass ends 0, and its own exit status survives the EXIT trap;
#   - fail ends the test at once and counts the failure;
#   - wait_for returns as soon as its condition holds, and fails when the time is up;
#   - the temporary folder $T of a child test is removed at its end.
. "$(dirname "$0")/lib.sh"

# child SCRIPT: run SCRIPT as a test that sources lib.sh; its output in $T/out, code returned.
child() {
  printf '. "%s/tests/e2e/lib.sh"\necho "T=$T"\n%s\n' "$SRC" "$1" >"$T/child.sh"
  local rc=0
  bash "$T/child.sh" >"$T/out" 2>&1 || rc=$?
  return "$rc"
}
child_t() { sed -n 's/^T=//p' "$T/out"; }

rc=0; child 'check "true holds" true
check "false holds" sh -c "echo why-it-failed; exit 3"
check "after a failure" true
echo reached-the-end' || rc=$?
[ "$rc" = 1 ] || { cat "$T/out"; fail "a failed check: exit $rc, expected 1"; }
grep -qx 'ok: true holds' "$T/out" || { cat "$T/out"; fail "no ok line for a passing check"; }
grep -q '^not ok: false holds' "$T/out" || { cat "$T/out"; fail "no 'not ok' line for a failing check"; }
grep -q '  | why-it-failed' "$T/out" || { cat "$T/out"; fail "the failing command's output is not shown"; }
grep -qx 'reached-the-end' "$T/out" || { cat "$T/out"; fail "the test stopped at a failed check"; }
grep -q '^# 2 passed, 1 failed' "$T/out" || { cat "$T/out"; fail "no count at the end"; }
[ -n "$(child_t)" ] && [ ! -e "$(child_t)" ] || fail "the child's \$T was left behind"
pass "check counts, goes on after a failure, and fails the test at its end"

child 'check "one" true; pass "two"' || { cat "$T/out"; fail "a test whose checks pass did not end 0"; }
grep -q '^# 2 passed, 0 failed' "$T/out" || { cat "$T/out"; fail "wrong count for passing checks"; }
rc=0; child 'check "one" true; exit 7' || rc=$?
[ "$rc" = 7 ] || { cat "$T/out"; fail "the test's own exit status was lost: $rc"; }
pass "passing checks end 0; the test's own exit status is kept"

rc=0; child 'pass "before"; fail "stop here"; echo not-reached' || rc=$?
[ "$rc" = 1 ] || { cat "$T/out"; fail "fail: exit $rc, expected 1"; }
! grep -q not-reached "$T/out" || fail "fail did not end the test"
grep -q '^# 1 passed, 1 failed' "$T/out" || { cat "$T/out"; fail "fail was not counted"; }
pass "fail ends the test and is counted"

rc=0; child '(sleep 0.3; touch "$T/flag") &
wait_for 20 test -e "$T/flag"
pass "waited"
wait_for 0.5 test -e "$T/never"
echo not-reached' || rc=$?
[ "$rc" = 1 ] || { cat "$T/out"; fail "wait_for: exit $rc, expected 1"; }
grep -qx 'ok: waited' "$T/out" || { cat "$T/out"; fail "wait_for did not see its condition come true"; }
grep -q 'FAIL: timed out after 0.5 s waiting for: test -e' "$T/out" || { cat "$T/out"; fail "wait_for did not time out"; }
! grep -q not-reached "$T/out" || fail "a timed-out wait_for did not end the test"
pass "wait_for polls until its condition holds, and fails when the time is up"
