// twinkle/data/dataset.h — an in-memory table of JSON rows, preprocessing and encoding.
//
// Semantics follow Twinkle's Dataset (src/twinkle/dataset/base.py):
//   Dataset(DatasetMeta(id, data_slice)) -> set_template(...) -> map(preprocessor) -> encode()
// Every rank builds the dataset itself (no communication). Rows are nlohmann::json
// objects; each row remembers where it came from ("<file>:<line>", 1-based line where
// the record starts), and every error about a row names it.
//
// File formats:
//   .jsonl  one JSON object per line (blank lines ignored)
//   .json   one JSON array of objects (the line of each element's first character is used)
//   .csv    header row then records; RFC 4180 quoting ("" escapes, quoted newlines);
//           every value is a string; a record with a different field count is an error
//   .parquet  row groups through Apache Arrow C++ (twinkle/data/parquet.h: the value of each Arrow
//           type as datasets gives it; "<file>:<n>" names the 1-based row n); refused naming
//           what to install in a build without parquet support
// A UTF-8 BOM at the start of a file is skipped. Invalid UTF-8 is an error (with the
// byte column), never silently replaced.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "twinkle/data/batch.h"
#include "twinkle/data/dataset_meta.h"
#include "twinkle/data/preprocessor.h"
#include "twinkle/data/pretokenized.h"
#include "twinkle/data/template.h"

namespace twinkle {

using json = nlohmann::json;

/// Encodes one conversation into 0..n rows (the signature of Template::encode).
/// `row_name` is "<file>:<line>" for error messages.
using EncodeFn = std::function<std::vector<EncodedRow>(const std::vector<Message>& messages, const std::string& row_name)>;

class Dataset {
 public:
  /// Loads meta.dataset_id (local file/dir, or hub id via resolve_dataset_files) and
  /// applies meta.data_slice (indices wrap modulo the row count). Throws twinkle::Error
  /// naming "<file>:<line>" for a malformed row (unless meta.skip_bad_rows), and for an
  /// empty result.
  explicit Dataset(const DatasetMeta& meta);

  /// A dataset from in-memory rows (each must be an object); rows are named
  /// "<name>:<i+1>". Throws twinkle::Error on a non-object or an empty list.
  static Dataset from_rows(std::vector<json> rows, const std::string& name = "<memory>");

  /// The rows order[k] = (part index, row index) of `parts`, in that order (repeats allowed), each
  /// keeping its "<file>:<line>" name; bad_rows / deleted_rows summed over the parts, skip_bad_rows
  /// of the first part; id `id`. What mix_datasets (twinkle/data/mixture.h) builds. Throws
  /// twinkle::Error when a part is encoded (mix before encode), a pair is out of range, or the
  /// order is empty.
  static Dataset from_parts(const std::vector<const Dataset*>& parts,
                            const std::vector<std::pair<int32_t, int64_t>>& order, const std::string& id);

  /// Number of rows (after slice/map/filter; before encoding splits/deletes rows).
  int64_t size() const { return static_cast<int64_t>(rows_.size()); }
  /// Row `i`; throws twinkle::Error if out of range.
  const json& operator[](int64_t i) const;
  /// "<file>:<line>" of row `i`.
  std::string row_name(int64_t i) const;
  /// The id/path this dataset was built from.
  const std::string& id() const { return id_; }

  /// map() and filter() after encode() discard the encoded rows (encode again).
  /// Applies `fn` to every row. The returned object is merged into the row (existing
  /// columns kept unless overwritten, like datasets.map); a null result drops the row
  /// (counted in deleted_rows()). An exception from `fn` (twinkle::Error, json errors,
  /// std::exception) becomes twinkle::Error("<file>:<line>: <message>") — or, with
  /// skip_bad_rows, a warning, and the row is dropped and counted in bad_rows().
  /// Throws twinkle::Error if no row is left. Returns *this.
  Dataset& map(const std::function<json(const json&)>& fn);
  Dataset& map(const Preprocessor& p);
  /// Keeps the rows where `pred` is true (errors handled as in map). Throws
  /// twinkle::Error("dataset '<id>' is empty after filter") if none is left.
  Dataset& filter(const std::function<bool(const json&)>& pred);

  /// Creates the Template used by encode() (Template(name, opts), twinkle/data/template.h).
  /// Throws what the Template constructor throws.
  void set_template(const std::string& name, const TemplateOptions& opts);
  /// The template set by set_template (null if none / a custom encoder is used).
  std::shared_ptr<const Template> get_template() const { return template_; }
  /// Uses a custom encoder instead of a Template (tests, other chat formats).
  void set_encoder(EncodeFn fn);

  /// Runs the encoder on every row's "messages" column (see parse_messages). A non-empty
  /// "tools" column (ms-swift's tool schemas, rendered into the system prompt) is a row error:
  /// the template has no tools.
  /// Rows the encoder returns nothing for (truncation "delete") or only empty rows for
  /// are dropped and counted in deleted_rows(); "split" rows expand to several encoded
  /// rows. Each encoded row keeps the index of its source row (encoded_source()).
  /// Errors (missing/invalid "messages", encoder errors, labels/input_ids length
  /// mismatch) name the row "<file>:<line>" unless skip_bad_rows is on. With
  /// num_threads > 1 rows are encoded concurrently (the encoder must then be
  /// thread-safe; Template::encode is const). Throws twinkle::Error if no encoded row
  /// is left or no encoder/template is set. Returns *this.
  Dataset& encode(int num_threads = 1);
  /// Encodes pre-tokenized rows ({"input_ids", optional "labels"}, twinkle/data/
  /// pretokenized.h) instead of running a template: each row through pretokenized_row and,
  /// when vocab_size > 0, check_row_vocab. A malformed row throws twinkle::Error naming
  /// "<file>:<line>" and the field, or, with skip_bad_rows, is dropped with a warning naming
  /// it and counted in bad_rows(). Throws twinkle::Error if no row is left. Returns *this.
  Dataset& encode_pretokenized(int64_t vocab_size = 0);
  bool is_encoded() const { return encoded_ != nullptr; }
  /// The encoded rows (throws twinkle::Error if encode() has not run).
  const std::vector<EncodedRow>& encoded() const;
  /// Shared handle on the encoded rows (what DataLoader holds; stays valid after the
  /// Dataset is destroyed or re-encoded).
  std::shared_ptr<const std::vector<EncodedRow>> encoded_ptr() const;
  /// Source row index (into this dataset's rows at encode time) of encoded row `i`.
  int64_t encoded_source(int64_t i) const;
  /// "<file>:<line>" of encoded row `i`.
  std::string encoded_row_name(int64_t i) const;
  /// Throws twinkle::Error "<file>:<line>: the row has N tokens, more than <limit>" for the first
  /// encoded row longer than `max_tokens` (e.g. the model's max_position_embeddings, which the
  /// training step would otherwise refuse mid-run without naming the row). Not affected by
  /// skip_bad_rows (the rows are already encoded; shorten them, or truncate with the template).
  void check_encoded_length(int64_t max_tokens, const std::string& limit) const;

  /// Turns later row errors (map, filter, encode) into counted warnings.
  void set_skip_bad_rows(bool on) { skip_bad_rows_ = on; }
  bool skip_bad_rows() const { return skip_bad_rows_; }
  /// Rows skipped as malformed so far (load + map + filter + encode).
  int64_t bad_rows() const { return bad_rows_; }
  /// Rows dropped on purpose (map returning null, encode returning no row).
  int64_t deleted_rows() const { return deleted_rows_; }

 private:
  Dataset() = default;
  struct Source {
    int32_t file = 0;  ///< index into files_
    int64_t line = 0;  ///< 1-based line where the record starts
  };
  void bad_row(int64_t i, const std::string& msg);
  void require_nonempty(const std::string& after) const;

  std::string id_;
  std::vector<std::string> files_;
  std::vector<json> rows_;
  std::vector<Source> sources_;
  bool skip_bad_rows_ = false;
  int64_t bad_rows_ = 0;
  int64_t deleted_rows_ = 0;
  int64_t warnings_printed_ = 0;
  std::shared_ptr<const Template> template_;
  EncodeFn encoder_;
  std::shared_ptr<const std::vector<EncodedRow>> encoded_;
  std::vector<Source> encoded_sources_;
  std::vector<int64_t> encoded_source_idx_;
};

/// Reads one data file into rows (the loader Dataset uses; exposed for tools/tests).
/// Each row is paired with the 1-based line where it starts. Malformed rows throw
/// twinkle::Error("<path>:<line>: ...") unless `skip_bad`, in which case they are
/// counted in LoadedRows::bad (with a warning on stderr for the first few). A CSV
/// quoted field that is never closed is always an error (the rest cannot be parsed).
/// A .json file whose first character is '{' is read as JSON Lines; a .parquet file's rows are
/// numbered 1.. in `lines` (read_parquet_rows, twinkle/data/parquet.h), and a string that is not
/// UTF-8 is its row's error; a corrupt or truncated parquet file is always an error.
struct LoadedRows {
  std::vector<json> rows;
  std::vector<int64_t> lines;
  int64_t bad = 0;
};
LoadedRows load_rows(const std::string& path, bool skip_bad = false);

}  // namespace twinkle
