#!/usr/bin/env bash
# check_run.sh REGEX CMD... — runs CMD and passes (exit 0) only when CMD exits 0 AND a whole line
# of its combined stdout+stderr matches the extended regex REGEX (grep -xE: anchored at both
# ends, so "0 mismatches" cannot be satisfied by "10 mismatches").
#
# Why: with PASS_REGULAR_EXPRESSION CTest ignores the exit code, so a check that printed its
# pass line and then failed was reported passed. tests/*.cmake use this wrapper (or plain exit
# codes) instead; tests/meta/check_ctest_entries.py enforces that.
#
# TWINKLE_CHECK_RUN_INJECT_RC=N (tests/meta only): pretend CMD exited N after it ran, to prove
# that a CTest entry built on this wrapper fails when its program fails.
set -u
re=$1; shift
out=$("$@" 2>&1); rc=$?
if [ -n "${TWINKLE_CHECK_RUN_INJECT_RC:-}" ]; then
  echo "check_run: TWINKLE_CHECK_RUN_INJECT_RC=${TWINKLE_CHECK_RUN_INJECT_RC} replaces exit code $rc"
  rc=$TWINKLE_CHECK_RUN_INJECT_RC
fi
printf '%s\n' "$out"
if [ "$rc" -ne 0 ]; then echo "check_run: FAIL: exit code $rc"; exit 1; fi
if ! printf '%s\n' "$out" | grep -qxE -- "$re"; then echo "check_run: FAIL: no output line is exactly /$re/"; exit 1; fi
echo "check_run: exit code 0 and a line matches /^$re\$/"
