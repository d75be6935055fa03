// train and SinkhornTransformer: the Sinkhorn Transformer through the same library calls as
// `tokenflow train` (read_train_config, make_test_pairs, initial_state, train,
// train_summary) and `tokenflow couple` (load_model, couple).
#include <pybind11/stl.h>

#include <chrono>
#include <functional>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "arrays.hpp"
#include "../../src/config/summary_documents.hpp"
#include "exports.hpp"
#include "json_to_python.hpp"
#include "tokenflow/dataset.hpp"
#include "tokenflow/model.hpp"
#include "tokenflow/model_file.hpp"
#include "tokenflow/tasks.hpp"
#include "tokenflow/train_config.hpp"
#include "tokenflow/ot_solve.hpp"
#include "tokenflow/summary.hpp"
#include "tokenflow/train.hpp"
#include "tokenflow/measure.hpp"

namespace tokenflow::python {

namespace {

// The [model] keys and values, from the schema (tokenflow/train_config.hpp): "width" -> 64, ...
py::dict model_config_dict(const ModelConfig& c) {
  py::dict d;
  ModelConfig copy = c;  // the schema's accessors take a mutable struct (they serve the reader too)
  for (const Key<ModelConfig>& k : model_schema()) {
    const std::string name = k.spec.key.substr(k.spec.key.find('.') + 1);
    std::visit(
        [&](auto field) {
          if constexpr (std::is_pointer_v<decltype(field)>) d[name.c_str()] = *field;
        },
        k.field(copy));
  }
  return d;
}

py::dict pair_to_python(CouplingPair&& p) {
  py::dict d;
  d["x"] = to_numpy(std::move(p.x));
  d["y"] = to_numpy(std::move(p.y));
  d["a"] = to_numpy(std::move(p.a));
  d["b"] = to_numpy(std::move(p.b));
  d["target"] = to_numpy(std::move(p.target));
  d["assignment"] = p.assignment.empty() ? py::object(py::none()) : py::object(to_numpy(std::move(p.assignment)));
  return d;
}

py::list pairs_to_python(std::vector<CouplingPair>&& pairs) {
  py::list out;
  for (CouplingPair& p : pairs) out.append(pair_to_python(std::move(p)));
  return out;
}

// Pairs given as dicts (x, y, target; a, b or None), checked as a dataset's files are
// (tokenflow/dataset.hpp): errors name "<name>[i]" and the array. One d for all.
std::vector<CouplingPair> pairs_from_python(const py::list& pairs, const std::string& name, int& d) {
  std::vector<CouplingPair> out;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const std::string source = fmt::format("{}[{}]", name, i);
    const py::dict item = pairs[i].cast<py::dict>();
    auto array = [&](const char* key) -> std::optional<InArray> {
      if (!item.contains(key) || item[key].is_none()) return std::nullopt;
      return item[key].cast<InArray>();
    };
    CouplingPair p;
    for (const char* key : {"x", "y", "target"}) {
      if (!array(key)) throw InputError(source, key, "is missing");
      if (array(key)->ndim() != 2) throw InputError(source, key, fmt::format("must be a 2-D array, not {}-D", array(key)->ndim()));
    }
    p.x = as_matrix(*array("x"), "x");
    p.y = as_matrix(*array("y"), "y");
    p.target = as_matrix(*array("target"), "target");
    for (const char* key : {"a", "b"})
      if (auto w = array(key)) {
        if (w->ndim() != 1) throw InputError(source, key, fmt::format("must be a 1-D array, not {}-D", w->ndim()));
        (key[0] == 'a' ? p.a : p.b) = as_vector(*w, key);
      }
    check_coupling_pair(p, source, d);
    d = static_cast<int>(p.x.cols());
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

void export_model(py::module_& m) {
  // Pairs of a coupling dataset (tokenflow/dataset.hpp): checked and completed (a, b, assignment),
  // and read from a dataset folder.
  m.def(
      "check_task_pairs",
      [](const py::list& pairs, const std::string& name) {
        int d = -1;
        return pairs_to_python(pairs_from_python(pairs, name, d));
      },
      py::arg("pairs"), py::arg("name"));
  m.def(
      "read_task_dataset",
      [](const std::string& path) {
        CouplingDataset data = without_gil([&](const auto&) { return read_coupling_dataset(path, -1, "path", "path"); });
        return py::make_tuple(pairs_to_python(std::move(data.train)), pairs_to_python(std::move(data.test)));
      },
      py::arg("path"));

  // The pairs of a task as training draws them: pair i of stream 0 (training) or 1 (test) of seed
  // `seed` (default train.seed), i.e. with seed = train.seed, entry b of step s's batch is pair s * batch + b of stream 0
  // and test pair i is pair i of stream 1 (src/model/train.cpp, evaluate.cpp).
  m.def(
      "sample_task_pairs",
      [](const Config& source, long count, std::optional<std::uint64_t> seed_arg, int stream) {
        if (count < 0) throw InputError("", "count", "must be >= 0 (got " + std::to_string(count) + ")");
        const TrainConfig config = read_train_config(source);
        const TaskSpec& task = config.task;
        const std::uint64_t seed = seed_arg.value_or(config.train.seed);
        // Each pair holds x (n x d), y (m x d), a (n), b (m) and the n x m target, in float64.
        const long double tokens_x = task.n, tokens_y = task.m, dim = task.d;
        const long double pair_bytes = 8.0L * ((tokens_x + tokens_y) * dim + tokens_x * tokens_y + tokens_x + tokens_y);
        check_fits_in_memory("count", static_cast<long double>(count) * pair_bytes,
                             fmt::format("count = {} pairs of up to {} tokens", count, task.n));
        py::list out;
        for (long i = 0; i < count; ++i)
          out.append(pair_to_python(without_gil(
              [&](const auto&) { return make_pair(task, pair_seed(seed, stream, static_cast<std::uint64_t>(i))); })));
        return out;
      },
      py::arg("config"), py::arg("count"), py::arg("seed"), py::arg("stream"));
  m.def(
      "describe_task", [](const Config& source) { return describe_task(read_train_config(source).task); },
      py::arg("config"));

  // couple()'s options, for the defaults of Python's Model.couple signature (one source: the struct).
  py::class_<CoupleOptions>(m, "CoupleOptions")
      .def(py::init<>())
      .def_readonly("unrolled", &CoupleOptions::unrolled)
      .def_readonly("tol", &CoupleOptions::tol)
      .def_readonly("max_iter", &CoupleOptions::max_iter);

  py::class_<SinkhornTransformer>(m, "SinkhornTransformer")
      .def_static(
          "load", [](const std::string& path) { return load_model(path); }, py::arg("path"))
      .def(
          "save",
          [](const SinkhornTransformer& model, const std::string& path) {
            save_model(path, model);
          },
          py::arg("path"))
      .def(
          "couple",
          [](const SinkhornTransformer& model, const InArray& x, const InArray& y,
             std::optional<InArray> a, std::optional<InArray> b, bool unrolled, double tol, int max_iter) {
            // The same arguments as `tokenflow couple` gives the library: the points as read, the
            // weights as given (couple normalizes them) or empty (uniform).
            const Points<double> xs(as_matrix(x, "x")), ys(as_matrix(y, "y"));
            const Eigen::VectorXd as = a ? Eigen::VectorXd(as_vector(*a, "a")) : Eigen::VectorXd();
            const Eigen::VectorXd bs = b ? Eigen::VectorXd(as_vector(*b, "b")) : Eigen::VectorXd();
            const CoupleOptions options{unrolled, tol, max_iter};
            Coupling c = without_gil([&](const auto&) { return couple_measures(model, xs, ys, as, bs, options); });
            RowMatrix& plan = c.plan;
            // As `tokenflow couple`: a plan that is not a coupling is no result.
            const auto normalized = [](const Eigen::VectorXd& w, Eigen::Index n) {
              return w.size() ? normalized_weights(w) : Eigen::VectorXd::Constant(n, 1.0 / n);
            };
            // An unbalanced model's columns are b e^{-g/rho}, not b (model.marginal_penalty).
            const std::string defect = coupling_defect(plan, normalized(as, plan.rows()),
                                                       normalized(bs, plan.cols()), INFINITY,
                                                       final_layer_config(model).unbalanced() ? INFINITY : kCouplingColumnTol);
            if (!defect.empty()) throw NumericalFailure("couple: " + defect);
            return py::make_tuple(to_numpy(std::move(plan)), c.marginal_error, c.iterations, c.converged);
          },
          py::arg("x"), py::arg("y"), py::arg("a") = py::none(), py::arg("b") = py::none(),
          py::arg("unrolled") = CoupleOptions{}.unrolled, py::arg("tol") = CoupleOptions{}.tol,
          py::arg("max_iter") = CoupleOptions{}.max_iter)
      .def_property_readonly(
          "config",
          [](const SinkhornTransformer& model) { return model_config_dict(model.config); })
      .def_property_readonly("config_toml",
                             [](const SinkhornTransformer& model) { return model.config_toml; })
      // The final layer's rho as couple() solves it (learned under model.learn_marginal_penalty);
      // None: balanced.
      .def_property_readonly("marginal_penalty",
                             [](const SinkhornTransformer& model) -> py::object {
                               const ModelConfig c = final_layer_config(model);
                               return c.unbalanced() ? py::object(py::float_(c.sinkhorn.marginal_penalty)) : py::none();
                             })
      .def_property_readonly("params", [](const SinkhornTransformer& model) {
        return to_numpy(std::vector<double>(model.params));  // a copy: the model keeps its own
      });

  m.def(
      "train",
      [](const Config& given, py::object progress, std::optional<py::list> pairs_arg,
         std::optional<py::list> test_pairs_arg, py::object on_warning) {
        const auto start = std::chrono::steady_clock::now();
        // Pairs in memory: a dataset task (kind "dataset" unless the config says otherwise, which
        // read_train_config refuses), checked as a dataset's files are.
        if (pairs_arg.has_value() != test_pairs_arg.has_value())
          throw InputError("", pairs_arg ? "test_pairs" : "pairs", "pairs and test_pairs are given together");
        Config source = given;
        CouplingDataset data;
        std::optional<DatasetShape> shape;
        if (pairs_arg) {
          int d = -1;
          data.train = pairs_from_python(*pairs_arg, "pairs", d);
          data.test = pairs_from_python(*test_pairs_arg, "test_pairs", d);
          if (data.train.empty()) throw InputError("", "pairs", "is empty (training needs at least one pair)");
          if (data.test.empty()) throw InputError("", "test_pairs", "is empty (test_w1 needs at least one pair)");
          data.largest_coordinate = std::max(largest_coordinate(data.train), largest_coordinate(data.test));
          if (!source.has("task.kind")) source.set("task.kind=\"dataset\"");
          shape = DatasetShape{d, static_cast<long>(data.test.size())};
          data.train_source = std::make_unique<PairsInMemory>(std::move(data.train));
        }
        const TrainConfig config = read_train_config(source, shape);
        if (pairs_arg) check_pairs_fit_dtype(config, data, "", "pairs");
        bool callback_raised = false;
        auto work = [&](const auto& keep_going) {
          if (!pairs_arg) data = training_data(config, source.source_of("task.path"));
          const std::vector<CouplingPair>& test_pairs = data.test;
          // Ctrl-C stops a long evaluation or step within a pair's time (the library polls this).
          const std::function<bool()> poll = [&keep_going] { return keep_going(); };
          TrainState state = initial_state(config, test_pairs, poll);
          TrainCallbacks callbacks;
          callbacks.keep_going = poll;
          callbacks.progress = [&](long step, long steps, double loss, double pairs_per_second) {
            if (callback_raised || !keep_going()) return false;
            if (progress.is_none()) return true;
            py::gil_scoped_acquire gil;
            try {
              progress(step, steps, loss, pairs_per_second);
            } catch (py::error_already_set& e) {
              e.restore();  // raised again below, once the library has unwound
              callback_raised = true;
              return false;
            }
            return true;
          };
          // A warning as it happens (tokenflow.TrainingWarning); one the filters turn into an
          // exception stops the run after this step, as a progress callback that raises does.
          callbacks.warning = [&](const std::string& line) {
            if (on_warning.is_none()) return;
            py::gil_scoped_acquire gil;
            try {
              on_warning(line);
            } catch (py::error_already_set& e) {
              e.restore();
              callback_raised = true;
            }
          };
          TrainResult result = train(config, std::move(state), test_pairs, callbacks, nullptr, data.train_source.get());
          if (callback_raised) throw Cancelled();  // a warning raised on the run's last step
          result.model.config_toml = to_toml(config);  // model.bin keeps the whole run's configuration
          result.best_model.config_toml = result.model.config_toml;
          return result;
        };
        std::optional<TrainResult> r;
        try {
          r.emplace(without_gil(work));
        } catch (const Cancelled&) {
          if (callback_raised) throw py::error_already_set();
          throw;
        }
        const double wall =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        py::dict metrics;  // the columns of metrics.csv
        auto column = [&](auto field) {
          std::vector<double> v;
          for (const MetricsRow& row : r->state.metrics)
            v.push_back(static_cast<double>(row.*field));
          return to_numpy(std::move(v));
        };
        std::vector<std::int64_t> steps;
        for (const MetricsRow& row : r->state.metrics) steps.push_back(row.step);
        metrics["step"] = to_numpy(std::move(steps));
        metrics["loss"] = column(&MetricsRow::loss);
        metrics["test_w1"] = column(&MetricsRow::test_w1);
        metrics["seconds"] = column(&MetricsRow::seconds);
        metrics["test_loss"] = column(&MetricsRow::test_loss);
        metrics["test_accuracy"] = column(&MetricsRow::test_accuracy);
        if (config.task.kind == "texts") {
          auto scores = [&](double AlignmentScores::*field) {
            std::vector<double> v;
            for (const MetricsRow& row : r->state.metrics) v.push_back(row.test_alignment.*field);
            return to_numpy(std::move(v));
          };
          metrics["test_aer"] = scores(&AlignmentScores::aer);
          metrics["test_precision"] = scores(&AlignmentScores::precision);
          metrics["test_recall"] = scores(&AlignmentScores::recall);
          metrics["test_link_mass"] = scores(&AlignmentScores::link_mass);
        }
        py::dict out;
        out["summary"] = to_python(train_summary(config, *r, 0, wall, data.notes));
        out["metrics"] = metrics;
        out["model"] = py::cast(std::move(r->model));
        out["best_model"] = py::cast(std::move(r->best_model));
        return out;
      },
      py::arg("config"), py::arg("progress") = py::none(), py::arg("pairs") = py::none(),
      py::arg("test_pairs") = py::none(), py::arg("on_warning") = py::none());
}

}  // namespace tokenflow::python
