// twinkle/dist/agreed_error.h — one refusal, raised on every rank of a group.
//
// A check that depends on a rank's own input (its data-parallel block of the batch) fails on some
// ranks only; if those ranks threw at once, a program that catches twinkle::Error (Python, an API
// user) would leave the other ranks waiting in their next collective forever. The caller instead
// folds "this rank refused" into a reduction every rank runs anyway, and then calls
// throw_agreed_error on every rank: all of them raise the same error. run_agreed wraps a piece
// of work that reads files or the rank's own input (loading a checkpoint, an adapter, a resume
// state): whatever throws on some ranks is raised on all of them.
#pragma once
#include <cstdint>
#include <exception>
#include <string>

#include "twinkle/dist/process_group.h"

namespace twinkle::dist {

/// `failed`: how many ranks of `group` refused their input, already summed over `group` by the
/// caller (the same value on every rank). Does nothing when failed == 0 (no communication).
/// Otherwise throws twinkle::Error on every rank of `group` with the same text: `local_error` of
/// the lowest-ranked rank of `group` whose local_error is non-empty (sent to the others with one
/// Min all-reduce and two broadcasts), prefixed "<group name> rank R: " with R its rank in
/// `group` (so every group of one kind, e.g. the dp-cp groups of all pipeline stages, raises the
/// same text when the same replica refused); a group of one rank throws local_error unprefixed. Every rank whose error is non-empty must be counted
/// in `failed`, and the group's ranks must all call it.
void throw_agreed_error(ProcessGroup& group, int64_t failed, const std::string& local_error);

/// Runs `f` on this rank and agrees on the outcome over `group`: when `f` throws (any
/// std::exception) on one or more ranks, every rank of `group` throws twinkle::Error with the
/// message of the lowest-ranked failing rank, prefixed "<group name> rank R: "
/// (throw_agreed_error). Collective over `group`: one I64 Sum all-reduce when no rank fails, plus
/// throw_agreed_error's exchange when some do. `f` must not itself run a collective that a rank
/// failing earlier in `f` would skip (the others would wait there). A group of one rank runs `f`
/// unwrapped, so its exception passes through unchanged.
template <class F>
void run_agreed(ProcessGroup& group, F&& f) {
  if (group.size() == 1) {
    f();
    return;
  }
  std::string err;
  try {
    f();
  } catch (const std::exception& e) {
    err = e.what();
    if (err.empty()) err = "unknown error";
  }
  int64_t failed = err.empty() ? 0 : 1;
  group.all_reduce(&failed, 1, DType::I64, ReduceOp::Sum);
  throw_agreed_error(group, failed, err);
}

}  // namespace twinkle::dist
