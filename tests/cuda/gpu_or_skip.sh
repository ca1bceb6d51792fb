#!/bin/sh
# Runs "$@" when a GPU is visible (nvidia-smi -L lists one); otherwise prints the reason and exits 77,
# which CTest reports as skipped (SKIP_RETURN_CODE 77) — never as passed.
if ! out=$(nvidia-smi -L 2>&1) || ! printf '%s\n' "$out" | grep -q '^GPU '; then
  echo "SKIPPED: no GPU visible (nvidia-smi -L: $(printf '%s' "$out" | head -n 1)): this check needs one"
  exit 77
fi
exec "$@"
