#include "twinkle/data/dataloader.h"
#include "twinkle/dist/runtime.h"

#include <limits>
#include <numeric>
#include <random>

#include "twinkle/core/error.h"
#include "twinkle/core/hash.h"
#include "twinkle/core/option_check.h"
#include "twinkle/data/dataset.h"
#include "permutation.h"

namespace twinkle {
namespace {

int64_t get_int(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) throw Error(std::string("DataLoader state: field '") + key + "' is missing");
  if (!it->is_number_integer()) throw Error(std::string("DataLoader state: field '") + key + "' is not an integer");
  return it->get<int64_t>();
}

}  // namespace

void validate(const DataLoaderOptions& o) {
  const char* s = "DataLoader";
  check_option(o.batch_size >= 1, s, "batch_size", ">= 1", o.batch_size);
  check_option(o.dp_size >= 0, s, "dp_size", ">= 0 (0 = from the global mesh)", o.dp_size);
  if (o.dp_size > 0) {
    check_option(o.dp_rank >= 0 && o.dp_rank < o.dp_size, s, "dp_rank",
                 "in [0, dp_size=" + std::to_string(o.dp_size) + ")", o.dp_rank);
    check_option(o.batch_size % o.dp_size == 0, s, "batch_size",
                 "divisible by dp_size " + std::to_string(o.dp_size) + " (each data-parallel rank needs an equal share)",
                 o.batch_size);
  }
  check_option(o.min_batch_size >= 0 && o.min_batch_size <= o.batch_size, s, "min_batch_size",
               "in [0, batch_size=" + std::to_string(o.batch_size) + "] (0 = keep every final batch)", o.min_batch_size);
}

nlohmann::json DataLoaderState::to_json() const {
  return {{"epoch", epoch},
          {"next_batch", next_batch},
          {"consumed_samples", consumed_samples},
          {"batch_size", batch_size},
          {"num_rows", num_rows}};
}

DataLoaderState DataLoaderState::from_json(const nlohmann::json& j) {
  check(j.is_object(), "DataLoader state: expected a JSON object");
  DataLoaderState s;
  s.epoch = get_int(j, "epoch");
  s.next_batch = get_int(j, "next_batch");
  s.consumed_samples = get_int(j, "consumed_samples");
  if (j.contains("batch_size")) s.batch_size = get_int(j, "batch_size");
  if (j.contains("num_rows")) s.num_rows = get_int(j, "num_rows");
  return s;
}

DataLoader::DataLoader(const Dataset& dataset, const DataLoaderOptions& opts)
    : rows_(dataset.encoded_ptr()), opts_(opts) {
  init();
}

DataLoader::DataLoader(std::shared_ptr<const std::vector<EncodedRow>> rows, const DataLoaderOptions& opts)
    : rows_(std::move(rows)), opts_(opts) {
  init();
}

DataLoader::DataLoader(std::vector<EncodedRow> rows, const DataLoaderOptions& opts)
    : rows_(std::make_shared<const std::vector<EncodedRow>>(std::move(rows))), opts_(opts) {
  init();
}

void DataLoader::init() {
  check(rows_ != nullptr && !rows_->empty(), "DataLoader: the dataset has no encoded rows");
  if (opts_.dp_size == 0) {
    // Like Twinkle's injected global mesh: this rank's data-parallel slot from initialize().
    if (is_initialized()) {
      const auto& ps = parallel_state();
      opts_.dp_size = ps.mesh.dp_size();
      opts_.dp_rank = ps.coord.dp;
    } else {
      opts_.dp_size = 1;
      opts_.dp_rank = 0;
    }
  }
  validate(opts_);
  const int64_t bs = opts_.batch_size, n = opts_.dp_size;
  const int64_t N = num_rows();
  const int64_t full = N / bs, rem = N % bs;
  const bool keep_tail = rem > 0 && !opts_.drop_last && rem >= opts_.min_batch_size;
  num_batches_ = full + (keep_tail ? 1 : 0);
  check(num_batches_ > 0,
        "DataLoader: " + std::to_string(N) + " rows make no batch: " +
            (opts_.drop_last ? "no full batch of batch_size " + std::to_string(bs) + " with drop_last"
                             : "fewer than min_batch_size " + std::to_string(opts_.min_batch_size)));
  auto& log = get_logger();
  if (bs > N && !opts_.drop_last)
    log.warning("DataLoader: batch_size " + std::to_string(bs) + " is larger than the dataset (" + std::to_string(N) +
                " rows): every step trains all " + std::to_string(N) + " rows (one batch per epoch)");
  else if (rem > 0 && opts_.drop_last)
    log.warning("DataLoader: drop_last drops the last " + std::to_string(rem) + " rows of every epoch (" +
                std::to_string(N) + " rows, batch_size " + std::to_string(bs) + ")");
  else if (rem > 0 && !keep_tail)
    log.warning("DataLoader: min_batch_size " + std::to_string(opts_.min_batch_size) + " ends every epoch before its last " +
                std::to_string(rem) + " rows (" + std::to_string(N) + " rows, batch_size " + std::to_string(bs) + ")");
  if (keep_tail && rem < n)
    log.warning("DataLoader: the last batch of each epoch has " + std::to_string(rem) + " rows for dp_size " +
                std::to_string(n) + ": " + std::to_string(n - rem) +
                " data-parallel ranks get no row in that step (they contribute 0 tokens; the loss is the "
                "global per-token mean, as on one process)");
}

std::vector<int64_t> DataLoader::epoch_order(int64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(num_rows()));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!opts_.shuffle) return order;
  detail::shuffle_seeded(order, splitmix64(opts_.seed + static_cast<uint64_t>(epoch)));
  return order;
}

LocalBatch DataLoader::batch(int64_t epoch, int64_t index) const {
  check(index >= 0 && index < num_batches_, "DataLoader: batch index " + std::to_string(index) + " outside [0, " +
                                                std::to_string(num_batches_) + ")");
  check(epoch >= 0, "DataLoader: negative epoch " + std::to_string(epoch));
  if (opts_.shuffle && cached_epoch_ != epoch) {
    cached_order_ = epoch_order(epoch);
    cached_epoch_ = epoch;
  }
  const int64_t N = num_rows(), bs = opts_.batch_size, n = opts_.dp_size, k = opts_.dp_rank;
  const int64_t start = index * bs;
  const int64_t b = std::min(bs, N - start);
  const int64_t lo = start + k * b / n, hi = start + (k + 1) * b / n;
  LocalBatch out;
  out.global_rows = b;
  out.index = index;
  out.epoch = epoch;
  out.rows.reserve(static_cast<size_t>(hi - lo));
  out.row_indices.reserve(static_cast<size_t>(hi - lo));
  for (int64_t p = lo; p < hi; ++p) {
    int64_t r = opts_.shuffle ? cached_order_[static_cast<size_t>(p)] : p;
    out.row_indices.push_back(r);
    out.rows.push_back((*rows_)[static_cast<size_t>(r)]);
  }
  return out;
}

bool DataLoader::next(LocalBatch& out) {
  if (state_.next_batch >= num_batches_) return false;
  out = batch(state_.epoch, state_.next_batch);
  ++state_.next_batch;
  state_.consumed_samples += out.global_rows;
  return true;
}

void DataLoader::next_epoch() {
  ++state_.epoch;
  state_.next_batch = 0;
}

DataLoaderState DataLoader::get_state() const {
  DataLoaderState s = state_;
  s.batch_size = opts_.batch_size;
  s.num_rows = num_rows();
  return s;
}

void DataLoader::set_state(const DataLoaderState& s) {
  check(s.epoch >= 0 && s.consumed_samples >= 0, "DataLoader::set_state: negative epoch or consumed_samples");
  check(s.batch_size == 0 || s.batch_size == opts_.batch_size,
        "DataLoader::set_state: the state was saved with batch_size " + std::to_string(s.batch_size) +
            ", this loader has batch_size " + std::to_string(opts_.batch_size));
  check(s.num_rows == 0 || s.num_rows == num_rows(),
        "DataLoader::set_state: the state was saved over " + std::to_string(s.num_rows) +
            " rows, this loader has " + std::to_string(num_rows()) + " (different dataset or data_slice?)");
  check(s.next_batch >= 0 && s.next_batch <= num_batches_,
        "DataLoader::set_state: next_batch " + std::to_string(s.next_batch) + " outside [0, " +
            std::to_string(num_batches_) + "] (was the state saved with another dataset or batch_size?)");
  state_ = s;
}

void DataLoader::skip_samples(int64_t n) {
  check(n >= 0, "DataLoader::skip_samples: negative count " + std::to_string(n));
  const int64_t bs = opts_.batch_size;
  const int64_t per_epoch = std::min(num_rows(), num_batches_ * bs);
  DataLoaderState s;
  s.epoch = n / per_epoch;
  const int64_t rem = n % per_epoch;
  check(rem % bs == 0, "DataLoader::skip_samples: " + std::to_string(n) + " samples is not a whole number of batches (batch_size " +
                           std::to_string(bs) + ", " + std::to_string(per_epoch) + " samples per epoch)");
  s.next_batch = rem / bs;
  s.consumed_samples = n;
  state_ = s;
}

DataLoader::iterator::iterator(DataLoader* l) : loader_(l) {
  if (!loader_->next(cur_)) loader_ = nullptr;
}

DataLoader::iterator& DataLoader::iterator::operator++() {
  if (loader_ && !loader_->next(cur_)) loader_ = nullptr;
  return *this;
}

DataLoader::iterator DataLoader::begin() {
  if (state_.next_batch >= num_batches_) next_epoch();
  return iterator(this);
}

std::vector<MicroBatch> make_micro_batches(const std::vector<EncodedRow>& rows, int64_t micro_batch_size,
                                           int32_t pad_id, bool packing) {
  check(!rows.empty(), "make_micro_batches: no rows");
  check(micro_batch_size >= 1, "make_micro_batches: micro_batch_size must be >= 1, got " + std::to_string(micro_batch_size));
  std::vector<MicroBatch> out;
  const size_t mbs = static_cast<size_t>(micro_batch_size);
  for (size_t s = 0; s < rows.size(); s += mbs) {
    std::vector<EncodedRow> chunk(rows.begin() + static_cast<std::ptrdiff_t>(s),
                                  rows.begin() + static_cast<std::ptrdiff_t>(std::min(rows.size(), s + mbs)));
    out.push_back(packing ? collate_packed(chunk) : collate_padded(chunk, pad_id));
  }
  return out;
}

}  // namespace twinkle
