// Refusals inside MegatronModel::forward_backward / forward_only are raised on EVERY rank with the
// same twinkle::Error, so a program that catches it (Python, an API user) never leaves a peer
// waiting in a collective: a bad row given to one data-parallel replica only — a token id or a
// label outside the vocabulary or a row longer than max_position_embeddings (Qwen3Model::prepare),
// rows that cannot be collated (every row empty: collate_padded) — and, with overlap_grad_reduce, a second forward_backward before the
// optimizer step (refused on every rank before any communication; under pp only the last stage
// used to throw, mid-backward). Before, the replica holding the bad row threw while the others
// went on into the token-count reduction (or stage 0 waited for the last stage's gradient): the
// run hung until the test's timeout. A bad row given to one rank of a replica only (its tp or pp
// peers get good rows: a Python program may do that) is refused on every rank too; before, only
// that rank's dp-cp group agreed, and the other stage went on into the pipeline's exchanges.
// After every refusal the job must go on: a good
// forward_backward + clip_grad_and_step runs on every rank with a finite loss, and refused calls
// do not advance the step counter.
// Usage: mpi_refusal_agreed MODEL_DIR [--pp N] [--dp N] [--tp N] [--ep N] [--cp N]
//   (world = tp*cp*pp*dp; dp >= 2; prints "refusal_agreed OK" on rank 0)
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "error_of.h"
#include "mpi_check.h"
#include "synthetic_rows.h"
#include "twinkle/core/error.h"
#include "twinkle/dist/runtime.h"
#include "twinkle/train/megatron_model.h"

using twinkle::test_support::error_of;

namespace {

using twinkle_test::synthetic_row;

// Runs f on every rank and returns its twinkle::Error text ("" when it did not throw).
}  // namespace

static int body(int argc, char** argv) {
  twinkle::check(argc >= 2, "usage: mpi_refusal_agreed MODEL_DIR [--pp N] [--dp N] [--tp N] [--ep N] [--cp N]");
  twinkle::MeshSizes sz;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    const int v = i + 1 < argc ? std::stoi(argv[++i]) : 1;
    if (a == "--pp") sz.pp = v;
    else if (a == "--dp") sz.dp = v;
    else if (a == "--tp") sz.tp = v;
    else if (a == "--ep") sz.ep = v;
    else if (a == "--cp") sz.cp = v;
    else throw twinkle::Error("mpi_refusal_agreed: unknown option " + a);
  }
  twinkle::check(sz.dp >= 2, "mpi_refusal_agreed needs dp >= 2 (the bad row goes to one replica only)");
  twinkle::InitOptions o;
  o.global_device_mesh = twinkle::DeviceMesh::from_sizes(sz);
  twinkle::initialize(o);
  auto& ps = twinkle::parallel_state();
  auto& world = *ps.world;
  const int dp_rank = ps.coord.dp;
  twinkle::MegatronModelOptions mo;
  mo.overlap_grad_reduce = true;
  twinkle::MegatronModel m(argv[1], mo);
  m.set_optimizer("default", {.lr = 1e-4});
  const int32_t vocab = static_cast<int32_t>(m.model().config().vocab_size);
  auto good = [&] {
    std::vector<twinkle::EncodedRow> rows;
    for (int k = 0; k < 2; ++k) rows.push_back(synthetic_row(12 + 4 * k, 3 * dp_rank + k));
    return rows;
  };
  // Every rank must hold the same error text (its length and a hash equal over the world).
  auto same_everywhere = [&](const std::string& err, const char* what) {
    int64_t v[4] = {static_cast<int64_t>(err.size()), static_cast<int64_t>(std::hash<std::string>{}(err) >> 1), 0, 0};
    v[2] = -v[0];
    v[3] = -v[1];
    world.all_reduce(v, 4, twinkle::DType::I64, twinkle::dist::ReduceOp::Max);
    MPI_CHECK(v[0] == -v[2] && v[1] == -v[3], what << ": the ranks raised different errors (here '" << err << "')");
  };
  struct Case {
    const char* name;
    int bad_replica;  // -1: the last world rank only (one rank of a replica, not its tp / pp peers)
    std::function<std::vector<twinkle::EncodedRow>()> rows;
    const char* expect;
  };
  const int32_t max_pos = static_cast<int32_t>(m.model().config().max_position_embeddings);
  const std::vector<Case> cases = {
      {"token id outside the vocabulary", 1,
       [&] {
         auto rows = good();
         rows[1].input_ids[3] = vocab + 5;
         return rows;
       },
       "is outside the vocabulary"},
      {"a token id outside the vocabulary on one rank of a replica only", -1,
       [&] {
         auto rows = good();
         rows[0].input_ids[1] = vocab;
         return rows;
       },
       "is outside the vocabulary"},
      {"label outside the vocabulary", 0,
       [&] {
         auto rows = good();
         rows[0].labels[2] = vocab;
         return rows;
       },
       "is outside the vocabulary"},
      {"rows that cannot be collated", 1,
       [&] { return std::vector<twinkle::EncodedRow>(2); },
       "collate_padded: all rows are empty"},
      {"a row longer than max_position_embeddings", 1,
       [&] {
         auto rows = good();
         rows[0] = synthetic_row(max_pos + 1, 9);  // collate numbers positions 0..L-1: the last one is max_pos
         return rows;
       },
       "exceeds max_position_embeddings"},
  };
  for (const Case& c : cases) {
    for (bool train : {true, false}) {
      const bool bad = c.bad_replica >= 0 ? dp_rank == c.bad_replica : world.rank() == world.size() - 1;
      const auto rows = bad ? c.rows() : good();
      const std::string err = error_of([&] { train ? (void)m.forward_backward(rows) : (void)m.forward_only(rows); });
      const std::string call = train ? "forward_backward: " : "forward_only: ";
      MPI_CHECK(err.find(c.expect) != std::string::npos && err.find(call) != std::string::npos &&
                    err.rfind("world rank ", 0) == 0,
                c.name << " (" << call << "): not refused here as expected (error: '" << err << "')");
      same_everywhere(err, c.name);
    }
  }
  MPI_CHECK(m.cur_step() == 0, "refused forward_backward calls advanced the step counter to " << m.cur_step());
  // overlap_grad_reduce: a second forward_backward before the step, refused everywhere.
  const double loss = m.forward_backward(good());
  const std::string err = error_of([&] { m.forward_backward(good()); });
  MPI_CHECK(err.find("with overlap_grad_reduce on") != std::string::npos,
            "a second forward_backward under overlap_grad_reduce was not refused here (error: '" << err << "')");
  same_everywhere(err, "second forward_backward");
  // The job goes on: the step of the first call, then a whole good step.
  m.clip_grad_and_step();
  const double loss2 = m.forward_backward(good());
  const twinkle::StepStats st = m.clip_grad_and_step();
  MPI_CHECK(std::isfinite(loss) && std::isfinite(loss2) && loss > 0 && !st.skipped && st.step == 2,
            "the steps after the refusals: losses " << loss << ", " << loss2 << ", step " << st.step);
  int64_t bad = twinkle_test::failures();
  world.all_reduce(&bad, 1, twinkle::DType::I64, twinkle::dist::ReduceOp::Sum);
  if (world.rank() == 0 && bad == 0)
    std::printf("refusal_agreed OK: %d ranks (dp %d, pp %d, tp %d, ep %d, cp %d), %zu bad-input cases refused alike "
                "on every rank, second forward_backward under overlap_grad_reduce refused alike, then 2 steps; "
                "losses %.6f %.6f\n",
                world.size(), sz.dp, sz.pp, sz.tp, sz.ep, sz.cp, cases.size(), loss, loss2);
  return bad == 0 ? 0 : 1;
}

int main(int argc, char** argv) { return twinkle::run_main(argc, argv, body); }
