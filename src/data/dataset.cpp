#include "twinkle/data/dataset.h"

#include <atomic>
#include <cstdio>
#include <thread>

#include "twinkle/core/error.h"
#include "twinkle/data/hub.h"

namespace twinkle {

Dataset::Dataset(const DatasetMeta& meta) {
  check(!meta.dataset_id.empty(), "DatasetMeta: dataset_id is empty");
  id_ = meta.dataset_id;
  skip_bad_rows_ = meta.skip_bad_rows;
  std::vector<std::string> files = resolve_dataset_files(meta.dataset_id, meta.subset_name, meta.split);
  std::vector<json> all;
  std::vector<Source> src;
  for (const auto& f : files) {
    LoadedRows lr = load_rows(f, skip_bad_rows_);
    bad_rows_ += lr.bad;
    const int32_t fi = static_cast<int32_t>(files_.size());
    files_.push_back(f);
    for (size_t k = 0; k < lr.rows.size(); ++k) {
      all.push_back(std::move(lr.rows[k]));
      src.push_back({fi, lr.lines[k]});
    }
  }
  std::string where = "dataset '" + id_ + "'";
  if (files.size() == 1 && files[0] != id_) where += " (" + files[0] + ")";
  check(!all.empty(), where + " has no rows" + (bad_rows_ ? " (" + std::to_string(bad_rows_) + " bad rows skipped)" : ""));
  if (meta.data_slice) {
    std::vector<int64_t> sel = meta.data_slice->resolve(static_cast<int64_t>(all.size()), where);
    rows_.reserve(sel.size());
    sources_.reserve(sel.size());
    for (int64_t k : sel) {
      rows_.push_back(all[static_cast<size_t>(k)]);
      sources_.push_back(src[static_cast<size_t>(k)]);
    }
    check(!rows_.empty(), where + " is empty after data_slice " + meta.data_slice->describe());
  } else {
    rows_ = std::move(all);
    sources_ = std::move(src);
  }
}

Dataset Dataset::from_rows(std::vector<json> rows, const std::string& name) {
  Dataset d;
  d.id_ = name;
  d.files_.push_back(name);
  check(!rows.empty(), "Dataset::from_rows('" + name + "'): no rows");
  for (size_t i = 0; i < rows.size(); ++i) {
    check(rows[i].is_object(), name + ":" + std::to_string(i + 1) + ": row is " + json_type_name(rows[i]) +
                                   ", expected a JSON object");
    d.sources_.push_back({0, static_cast<int64_t>(i + 1)});
  }
  d.rows_ = std::move(rows);
  return d;
}

Dataset Dataset::from_parts(const std::vector<const Dataset*>& parts,
                            const std::vector<std::pair<int32_t, int64_t>>& order, const std::string& id) {
  check(!parts.empty(), "Dataset::from_parts('" + id + "'): no dataset");
  check(!order.empty(), "dataset '" + id + "' has no rows (the mixture selects none)");
  Dataset d;
  d.id_ = id;
  d.skip_bad_rows_ = parts.front()->skip_bad_rows_;
  std::vector<int32_t> file_base;
  for (const Dataset* p : parts) {
    check(p != nullptr, "Dataset::from_parts('" + id + "'): a null part");
    check(p->encoded_ == nullptr, "dataset '" + p->id_ + "': mix datasets before encode() (the mixture is encoded once)");
    file_base.push_back(static_cast<int32_t>(d.files_.size()));
    d.files_.insert(d.files_.end(), p->files_.begin(), p->files_.end());
    d.bad_rows_ += p->bad_rows_;
    d.deleted_rows_ += p->deleted_rows_;
  }
  d.rows_.reserve(order.size());
  d.sources_.reserve(order.size());
  for (const auto& [pi, ri] : order) {
    check(pi >= 0 && static_cast<size_t>(pi) < parts.size() && ri >= 0 && ri < parts[static_cast<size_t>(pi)]->size(),
          "Dataset::from_parts('" + id + "'): row (" + std::to_string(pi) + ", " + std::to_string(ri) + ") out of range");
    const Dataset& p = *parts[static_cast<size_t>(pi)];
    d.rows_.push_back(p.rows_[static_cast<size_t>(ri)]);
    Source s = p.sources_[static_cast<size_t>(ri)];
    s.file += file_base[static_cast<size_t>(pi)];
    d.sources_.push_back(s);
  }
  return d;
}

const json& Dataset::operator[](int64_t i) const {
  check(i >= 0 && i < size(), "dataset '" + id_ + "': row index " + std::to_string(i) + " out of range [0, " +
                                  std::to_string(size()) + ")");
  return rows_[static_cast<size_t>(i)];
}

std::string Dataset::row_name(int64_t i) const {
  check(i >= 0 && i < size(), "dataset '" + id_ + "': row index " + std::to_string(i) + " out of range");
  const Source& s = sources_[static_cast<size_t>(i)];
  return files_[static_cast<size_t>(s.file)] + ":" + std::to_string(s.line);
}

void Dataset::bad_row(int64_t i, const std::string& msg) {
  std::string name = row_name(i);
  std::string full = msg.find(name) != std::string::npos ? msg : name + ": " + msg;
  if (!skip_bad_rows_) throw Error(full);
  if (warnings_printed_ < 5) std::fprintf(stderr, "[twinkle] warning: skipping bad row: %s\n", full.c_str());
  if (warnings_printed_ == 5)
    std::fprintf(stderr, "[twinkle] warning: further bad rows of dataset '%s' are skipped silently\n", id_.c_str());
  ++warnings_printed_;
  ++bad_rows_;
}

void Dataset::require_nonempty(const std::string& after) const {
  if (!rows_.empty()) return;
  std::string why;
  if (bad_rows_) why += std::to_string(bad_rows_) + " bad rows skipped";
  if (deleted_rows_) why += std::string(why.empty() ? "" : ", ") + std::to_string(deleted_rows_) + " rows deleted";
  throw Error("dataset '" + id_ + "' is empty after " + after + (why.empty() ? "" : " (" + why + ")"));
}

namespace {
// Runs f() and returns the error message of any exception it throws ("" if none).
template <class F>
std::string capture(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const json::exception& e) {
    std::string w = e.what();
    if (!w.empty() && w[0] == '[') {
      auto p = w.find("] ");
      if (p != std::string::npos) w = w.substr(p + 2);
    }
    return w;
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
}  // namespace

Dataset& Dataset::map(const std::function<json(const json&)>& fn) {
  encoded_.reset();
  std::vector<json> rows;
  std::vector<Source> src;
  rows.reserve(rows_.size());
  src.reserve(rows_.size());
  for (size_t i = 0; i < rows_.size(); ++i) {
    json out;
    std::string err = capture([&] { out = fn(rows_[i]); });
    if (err.empty() && !out.is_null() && !out.is_object())
      err = "map function returned " + json_type_name(out) + ", expected an object (or null to drop the row)";
    if (!err.empty()) {
      bad_row(static_cast<int64_t>(i), err);
      continue;
    }
    if (out.is_null()) {
      ++deleted_rows_;
      continue;
    }
    json row = std::move(rows_[i]);
    for (auto it = out.begin(); it != out.end(); ++it) row[it.key()] = std::move(it.value());
    rows.push_back(std::move(row));
    src.push_back(sources_[i]);
  }
  rows_ = std::move(rows);
  sources_ = std::move(src);
  require_nonempty("map");
  return *this;
}

Dataset& Dataset::map(const Preprocessor& p) {
  return map([&p](const json& r) { return p(r); });
}

Dataset& Dataset::filter(const std::function<bool(const json&)>& pred) {
  encoded_.reset();
  std::vector<json> rows;
  std::vector<Source> src;
  for (size_t i = 0; i < rows_.size(); ++i) {
    bool keep = false;
    std::string err = capture([&] { keep = pred(rows_[i]); });
    if (!err.empty()) {
      bad_row(static_cast<int64_t>(i), err);
      continue;
    }
    if (keep) {
      rows.push_back(std::move(rows_[i]));
      src.push_back(sources_[i]);
    }
  }
  rows_ = std::move(rows);
  sources_ = std::move(src);
  require_nonempty("filter");
  return *this;
}

void Dataset::set_encoder(EncodeFn fn) {
  check(static_cast<bool>(fn), "Dataset::set_encoder: empty function");
  encoder_ = std::move(fn);
  template_.reset();
}

Dataset& Dataset::encode(int num_threads) {
  check(static_cast<bool>(encoder_), "dataset '" + id_ + "': encode() needs set_template() (or set_encoder()) first");
  const size_t n = rows_.size();
  std::vector<std::vector<EncodedRow>> out(n);
  std::vector<std::string> err(n);
  auto work = [&](size_t i) {
    err[i] = capture([&] {
      const json& row = rows_[i];
      auto it = row.find("messages");
      if (it == row.end())
        throw Error("column 'messages' is missing (map a preprocessor such as SelfCognitionProcessor first)");
      // ms-swift renders a "tools" column (function schemas) into the system prompt; the chat
      // template here has no tools (template.h), so such a row would train without them, silently.
      auto tools = row.find("tools");
      if (tools != row.end() && !tools->is_null() && !((tools->is_array() || tools->is_string()) && tools->empty()))
        throw Error("column 'tools' (tool schemas for the system prompt) is not supported by the chat template "
                    "implementation: the row would train without them (drop the column, or the row)");
      std::vector<Message> msgs = parse_messages(*it);
      out[i] = encoder_(msgs, row_name(static_cast<int64_t>(i)));
      for (size_t k = 0; k < out[i].size(); ++k) {
        EncodedRow& r = out[i][k];
        const size_t L = r.input_ids.size();
        const std::string w = "encoded row " + std::to_string(k) + ": ";
        check(r.labels.size() == L, w + "labels has " + std::to_string(r.labels.size()) + " entries, input_ids " +
                                        std::to_string(L));
        if (r.attention_mask.empty()) r.attention_mask.assign(L, 1);
        if (r.position_ids.empty())
          for (size_t t = 0; t < L; ++t) r.position_ids.push_back(static_cast<int32_t>(t));
        check(r.attention_mask.size() == L, w + "attention_mask length differs from input_ids");
        check(r.position_ids.size() == L, w + "position_ids length differs from input_ids");
        r.length = static_cast<int64_t>(L);
      }
    });
  };
  const size_t nt = std::min<size_t>(num_threads > 1 ? static_cast<size_t>(num_threads) : 1, n);
  if (nt <= 1) {
    for (size_t i = 0; i < n; ++i) work(i);
  } else {
    std::atomic<size_t> next{0};
    std::vector<std::thread> ts;
    for (size_t t = 0; t < nt; ++t)
      ts.emplace_back([&] {
        for (size_t i; (i = next.fetch_add(1)) < n;) work(i);
      });
    for (auto& t : ts) t.join();
  }
  auto enc = std::make_shared<std::vector<EncodedRow>>();
  std::vector<Source> esrc;
  std::vector<int64_t> eidx;
  int64_t deleted = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!err[i].empty()) {
      bad_row(static_cast<int64_t>(i), err[i]);
      continue;
    }
    bool any = false;
    for (auto& r : out[i]) {
      if (r.input_ids.empty()) continue;  // Twinkle drops rows whose input_ids is empty
      enc->push_back(std::move(r));
      esrc.push_back(sources_[i]);
      eidx.push_back(static_cast<int64_t>(i));
      any = true;
    }
    if (!any) ++deleted;
  }
  deleted_rows_ += deleted;
  if (enc->empty())
    throw Error("dataset '" + id_ + "' is empty after encode (" + std::to_string(n) + " rows: " +
                std::to_string(deleted) + " deleted by the template's truncation, " + std::to_string(bad_rows_) +
                " bad rows skipped in total)");
  encoded_ = std::move(enc);
  encoded_sources_ = std::move(esrc);
  encoded_source_idx_ = std::move(eidx);
  return *this;
}

Dataset& Dataset::encode_pretokenized(int64_t vocab_size) {
  auto enc = std::make_shared<std::vector<EncodedRow>>();
  std::vector<Source> esrc;
  std::vector<int64_t> eidx;
  enc->reserve(rows_.size());
  for (size_t i = 0; i < rows_.size(); ++i) {
    const std::string name = row_name(static_cast<int64_t>(i));
    EncodedRow r;
    const std::string err = capture([&] {
      r = pretokenized_row(rows_[i], name);
      if (vocab_size > 0) check_row_vocab(r, vocab_size, name);
    });
    if (!err.empty()) {
      bad_row(static_cast<int64_t>(i), err);
      continue;
    }
    enc->push_back(std::move(r));
    esrc.push_back(sources_[i]);
    eidx.push_back(static_cast<int64_t>(i));
  }
  if (enc->empty())
    throw Error("dataset '" + id_ + "' has no valid pre-tokenized row (" + std::to_string(bad_rows_) +
                " bad rows skipped in total)");
  encoded_ = std::move(enc);
  encoded_sources_ = std::move(esrc);
  encoded_source_idx_ = std::move(eidx);
  return *this;
}

const std::vector<EncodedRow>& Dataset::encoded() const {
  check(encoded_ != nullptr, "dataset '" + id_ + "' is not encoded: call set_template() and encode() first");
  return *encoded_;
}

std::shared_ptr<const std::vector<EncodedRow>> Dataset::encoded_ptr() const {
  check(encoded_ != nullptr, "dataset '" + id_ + "' is not encoded: call set_template() and encode() first");
  return encoded_;
}

int64_t Dataset::encoded_source(int64_t i) const {
  check(encoded_ && i >= 0 && i < static_cast<int64_t>(encoded_->size()),
        "dataset '" + id_ + "': encoded row index " + std::to_string(i) + " out of range");
  return encoded_source_idx_[static_cast<size_t>(i)];
}

void Dataset::check_encoded_length(int64_t max_tokens, const std::string& limit) const {
  const auto& rows = encoded();
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].length > max_tokens)
      throw Error(encoded_row_name(static_cast<int64_t>(i)) + ": the row has " + std::to_string(rows[i].length) +
                  " tokens, more than " + limit);
}

std::string Dataset::encoded_row_name(int64_t i) const {
  check(encoded_ && i >= 0 && i < static_cast<int64_t>(encoded_->size()),
        "dataset '" + id_ + "': encoded row index " + std::to_string(i) + " out of range");
  const Source& s = encoded_sources_[static_cast<size_t>(i)];
  return files_[static_cast<size_t>(s.file)] + ":" + std::to_string(s.line);
}

}  // namespace twinkle
