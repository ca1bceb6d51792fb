// python/src/data.cpp — DatasetMeta / Dataset / preprocessors / DataLoader
// (twinkle/data/*.h) and the row <-> dict conversion the model binding shares.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>

#include "bindings.h"
#include "data_rows.h"
#include "twinkle/data/dataloader.h"
#include "twinkle/data/dataset.h"
#include "twinkle/data/mixture.h"
#include "twinkle/data/preprocessor.h"
#include "twinkle/data/template.h"

namespace twinkle_py {

using twinkle::json;

namespace {

py::list int_list(const std::vector<int32_t>& v) {
  py::list l(v.size());
  for (size_t i = 0; i < v.size(); ++i) l[i] = py::int_(v[i]);
  return l;
}

std::vector<int32_t> int_vector(const py::handle& o, const std::string& what) {
  py::array_t<int32_t, py::array::c_style | py::array::forcecast> a;
  try {
    a = py::array_t<int32_t, py::array::c_style | py::array::forcecast>::ensure(o);
  } catch (const py::error_already_set&) {
  }
  if (!a || a.ndim() != 1) throw py::value_error(what + " must be a 1-D list or array of ints");
  return std::vector<int32_t>(a.data(), a.data() + a.size());
}

/// A Dataset and the DataLoader over it (the dataset is kept for the original columns).
struct PyDataLoader {
  std::shared_ptr<twinkle::Dataset> dataset;
  std::unique_ptr<twinkle::DataLoader> loader;
};

}  // namespace

py::dict row_to_dict(const twinkle::EncodedRow& r, const json* source) {
  py::dict d;
  if (source && source->is_object())
    for (auto it = source->begin(); it != source->end(); ++it) d[py::str(it.key())] = to_py(it.value());
  d["input_ids"] = int_list(r.input_ids);
  d["labels"] = int_list(r.labels);
  d["attention_mask"] = int_list(r.attention_mask);
  d["position_ids"] = int_list(r.position_ids);
  d["length"] = py::int_(r.length);
  return d;
}

std::vector<twinkle::EncodedRow> rows_from_py(const py::handle& inputs) {
  if (py::isinstance<py::dict>(inputs)) {  // one row
    py::list one;
    one.append(inputs);
    return rows_from_py(one);
  }
  if (!py::isinstance<py::list>(inputs) && !py::isinstance<py::tuple>(inputs))
    throw py::type_error("inputs must be a list of row dicts (a DataLoader batch), got " +
                         std::string(py::str(inputs.get_type().attr("__name__"))));
  std::vector<twinkle::EncodedRow> rows;
  size_t i = 0;
  for (auto item : inputs) {
    const std::string name = "inputs[" + std::to_string(i++) + "]";
    if (!py::isinstance<py::dict>(item)) throw py::type_error(name + " must be a dict with input_ids and labels");
    auto d = item.cast<py::dict>();
    if (!d.contains("input_ids"))
      throw py::value_error(name + " has no 'input_ids': encode the dataset first (Dataset.encode())");
    if (!d.contains("labels")) throw py::value_error(name + " has no 'labels'");
    twinkle::EncodedRow r;
    r.input_ids = int_vector(d["input_ids"], name + "['input_ids']");
    r.labels = int_vector(d["labels"], name + "['labels']");
    if (r.labels.size() != r.input_ids.size())
      throw py::value_error(name + ": labels has " + std::to_string(r.labels.size()) + " entries, input_ids " +
                            std::to_string(r.input_ids.size()));
    const size_t n = r.input_ids.size();
    if (d.contains("attention_mask") && !d["attention_mask"].is_none())
      r.attention_mask = int_vector(d["attention_mask"], name + "['attention_mask']");
    else
      r.attention_mask.assign(n, 1);
    if (d.contains("position_ids") && !d["position_ids"].is_none()) {
      r.position_ids = int_vector(d["position_ids"], name + "['position_ids']");
    } else {
      r.position_ids.resize(n);
      for (size_t t = 0; t < n; ++t) r.position_ids[t] = static_cast<int32_t>(t);
    }
    if (r.attention_mask.size() != n || r.position_ids.size() != n)
      throw py::value_error(name + ": attention_mask / position_ids must have as many entries as input_ids (" +
                            std::to_string(n) + ")");
    r.length = static_cast<int64_t>(n);
    rows.push_back(std::move(r));
  }
  return rows;
}

void bind_data(py::module_& m) {
  using namespace twinkle;
  // what forward_backward does to its inputs before the C++ call (bench/python_overhead.py)
  m.def("_convert_rows", [](py::object inputs) { return static_cast<int64_t>(rows_from_py(inputs).size()); });
  py::class_<Preprocessor, std::shared_ptr<Preprocessor>>(m, "Preprocessor")
      .def("__call__", [](const Preprocessor& p, py::dict row) { return to_py(p(from_py(row))); })
      .def_property_readonly("name", &Preprocessor::name);
  py::class_<SelfCognitionProcessor, Preprocessor, std::shared_ptr<SelfCognitionProcessor>>(m,
                                                                                           "SelfCognitionProcessor")
      .def(py::init<std::string, std::string, std::string>(), py::arg("model_name"), py::arg("model_author"),
           py::arg("system"));
  py::class_<MessagesPreprocessor, Preprocessor, std::shared_ptr<MessagesPreprocessor>>(m, "MessagesPreprocessor")
      .def(py::init<std::string>(), py::arg("default_system"));
  py::class_<AlpacaPreprocessor, Preprocessor, std::shared_ptr<AlpacaPreprocessor>>(m, "AlpacaPreprocessor")
      .def(py::init<std::string>(), py::arg("default_system"));

  // twinkle/data/mixture.h: the datasets mixed in this order (counts[i] < 0 = every row of part i)
  m.def(
      "mix_datasets",
      [](const std::vector<std::shared_ptr<Dataset>>& parts, const std::string& mode, uint64_t seed,
         const std::vector<int64_t>& counts) {
        std::shared_ptr<Dataset> out;
        arg_check([&] {
          std::vector<const Dataset*> ptrs;
          std::vector<DatasetSpec> specs;
          for (size_t i = 0; i < parts.size(); ++i) {
            ptrs.push_back(parts[i].get());
            DatasetSpec sp;
            sp.id = parts[i]->id();
            if (i < counts.size() && counts[i] >= 0) sp.count = counts[i];
            specs.push_back(sp);
          }
          MixOptions mo;
          mo.mode = parse_mix_mode(mode, "mix_dataset");
          mo.seed = seed;
          out = std::make_shared<Dataset>(mix_datasets(ptrs, specs, mo));
        });
        return out;
      },
      py::arg("parts"), py::arg("mode"), py::arg("seed"), py::arg("counts"));

  py::class_<Dataset, std::shared_ptr<Dataset>>(m, "Dataset")
      .def(py::init([](const std::string& id, std::optional<std::vector<int64_t>> slice, const std::string& subset,
                       const std::string& split, bool skip_bad_rows) {
             std::optional<DataSlice> ds;
             if (slice) arg_check([&] { ds = DataSlice::indices(*slice); });
             DatasetMeta meta(id, ds, subset, split);
             meta.skip_bad_rows = skip_bad_rows;
             return std::make_shared<Dataset>(meta);
           }),
           py::arg("dataset_id"), py::arg("data_slice"), py::arg("subset_name"), py::arg("split"),
           py::arg("skip_bad_rows"))
      .def_static("from_rows",
                  [](py::list rows, const std::string& name) {
                    std::vector<json> js;
                    for (auto r : rows) js.push_back(from_py(r));
                    std::shared_ptr<Dataset> d;
                    arg_check([&] { d = std::make_shared<Dataset>(Dataset::from_rows(std::move(js), name)); });
                    return d;
                  })
      .def("__len__", &Dataset::size)
      .def("__getitem__",
           [](const Dataset& d, int64_t i) {
             if (i < 0) i += d.size();
             if (i < 0 || i >= d.size()) throw py::index_error("dataset index out of range");
             return to_py(d[i]);
           })
      .def("set_template",
           [](Dataset& d, const std::string& name, const std::string& model_id, int64_t max_length,
              const std::string& truncation, bool enable_thinking, const std::string& default_system) {
             TemplateOptions o{.model_id = model_id, .max_length = max_length, .truncation = truncation,
                               .enable_thinking = enable_thinking, .default_system = default_system};
             arg_check([&] { validate(o); });
             if (name != "Template" && name != "qwen3")
               throw py::value_error("template '" + name + "' is unknown (twinkle has 'Template' (Qwen3))");
             d.set_template(name, o);
           })
      .def("map_preprocessor", [](Dataset& d, const Preprocessor& p) { d.map(p); })
      .def("map_callable",
           [](Dataset& d, py::function fn) {
             d.map([&fn](const json& row) -> json {
               py::object out = fn(to_py(row));
               return from_py(out);
             });
           })
      .def("filter_callable",
           [](Dataset& d, py::function fn) {
             d.filter([&fn](const json& row) { return py::bool_(fn(to_py(row))).cast<bool>(); });
           })
      .def("encode", [](Dataset& d, int num_threads) { d.encode(num_threads); })
      .def("is_encoded", &Dataset::is_encoded)
      .def("encoded_len", [](const Dataset& d) { return static_cast<int64_t>(d.encoded().size()); })
      .def("encoded_row",
           [](const Dataset& d, int64_t i) {
             const auto& rows = d.encoded();
             if (i < 0) i += static_cast<int64_t>(rows.size());
             if (i < 0 || i >= static_cast<int64_t>(rows.size())) throw py::index_error("encoded index out of range");
             int64_t src = d.encoded_source(i);
             const json* s = src >= 0 && src < d.size() ? &d[src] : nullptr;
             return row_to_dict(rows[static_cast<size_t>(i)], s);
           })
      .def_property_readonly("id", &Dataset::id)
      .def_property_readonly("bad_rows", &Dataset::bad_rows)
      .def_property_readonly("deleted_rows", &Dataset::deleted_rows);

  py::class_<PyDataLoader>(m, "DataLoader")
      .def(py::init([](std::shared_ptr<Dataset> ds, int64_t batch_size, bool shuffle, uint64_t seed, bool drop_last,
                       int64_t min_batch_size) {
             DataLoaderOptions o{.batch_size = batch_size,
                                 .shuffle = shuffle,
                                 .seed = seed,
                                 .drop_last = drop_last,
                                 .min_batch_size = min_batch_size};
             arg_check([&] { validate(o); });
             auto p = std::make_unique<PyDataLoader>();
             p->dataset = ds;
             p->loader = std::make_unique<DataLoader>(*ds, o);
             return p;
           }),
           py::arg("dataset"), py::arg("batch_size"), py::arg("shuffle"), py::arg("seed"), py::arg("drop_last"),
           py::arg("min_batch_size") = 0)
      .def("__len__", [](const PyDataLoader& p) { return p.loader->size(); })
      .def_property_readonly("num_rows", [](const PyDataLoader& p) { return p.loader->num_rows(); })
      .def("epoch_finished",
           [](const PyDataLoader& p) { return p.loader->get_state().next_batch >= p.loader->size(); })
      .def("next_epoch", [](PyDataLoader& p) { p.loader->next_epoch(); })
      .def("next_batch",
           [](PyDataLoader& p) -> py::object {
             LocalBatch b;
             if (!p.loader->next(b)) return py::none();
             py::list out;
             const Dataset& d = *p.dataset;
             for (size_t i = 0; i < b.rows.size(); ++i) {
               const json* src = nullptr;
               if (d.is_encoded() && i < b.row_indices.size()) {
                 int64_t s = d.encoded_source(b.row_indices[i]);
                 if (s >= 0 && s < d.size()) src = &d[s];
               }
               out.append(row_to_dict(b.rows[i], src));
             }
             return out;
           })
      .def("get_state", [](const PyDataLoader& p) { return to_py(p.loader->get_state().to_json()); })
      .def("set_state", [](PyDataLoader& p, py::dict s) {
        DataLoaderState st;
        arg_check([&] { st = DataLoaderState::from_json(from_py(s)); });
        p.loader->set_state(st);
      })
      .def("skip_samples", [](PyDataLoader& p, int64_t n) { arg_check([&] { p.loader->skip_samples(n); }); })
      .def_property_readonly("consumed_samples", [](const PyDataLoader& p) { return p.loader->consumed_samples(); });
}

}  // namespace twinkle_py
