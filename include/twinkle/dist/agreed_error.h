// twinkle/dist/agreed_error.h — one refusal, raised on every rank of a group.
//
// A check that depends on a rank's own input (its data-parallel block of the batch) fails on some
// ranks only; if those ranks threw at once, a program that catches twinkle::Error (Python, an API
// user) would leave the other ranks waiting in their next collective forever. The caller instead
// folds "this rank refused" into a reduction every rank runs anyway, and then calls
// throw_agreed_error on every rank: all of them raise the same error.
#pragma once
#include <cstdint>
#include <string>

#include "twinkle/dist/process_group.h"

namespace twinkle::dist {

/// `failed`: how many ranks of `group` refused their input, already summed over `group` by the
/// caller (the same value on every rank). Does nothing when failed == 0 (no communication).
/// Otherwise throws twinkle::Error on every rank of `group` with the same text: `local_error` of
/// the lowest-ranked rank of `group` whose local_error is non-empty (sent to the others with one
/// Min all-reduce and two broadcasts), prefixed "<group name> rank R: " with R its rank in
/// `group` (so every group of one kind, e.g. the dp-cp groups of all pipeline stages, raises the
/// same text when the same replica refused). Every rank whose error is non-empty must be counted
/// in `failed`, and the group's ranks must all call it.
void throw_agreed_error(ProcessGroup& group, int64_t failed, const std::string& local_error);

}  // namespace twinkle::dist
