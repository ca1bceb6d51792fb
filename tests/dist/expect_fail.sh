#!/usr/bin/env bash
# expect_fail.sh MAX_SECONDS REGEX CMD... — runs CMD under `timeout 60`; passes when it exits
# non-zero (not by the timeout) within MAX_SECONDS and its combined output matches REGEX
# (grep -E).
set -u
max=$1; re=$2; shift 2
start=$(date +%s%N)
out=$(timeout 60 "$@" 2>&1); rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
printf '%s\n' "$out" | tail -n 30
echo "expect_fail: exit code $rc after ${ms} ms"
if [ "$rc" -eq 0 ]; then echo "expect_fail: FAIL: the command succeeded"; exit 1; fi
if [ "$rc" -eq 124 ]; then echo "expect_fail: FAIL: the job hung (killed by timeout 60)"; exit 1; fi
if [ "$ms" -gt $(( max * 1000 )) ]; then echo "expect_fail: FAIL: took longer than ${max} s"; exit 1; fi
if ! printf '%s\n' "$out" | grep -qE -- "$re"; then echo "expect_fail: FAIL: output lacks /$re/"; exit 1; fi
echo "expect_fail: OK"
