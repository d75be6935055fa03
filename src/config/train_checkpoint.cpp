// checkpoint.bin of `tokenflow train`: the payload of the checkpoint container (tokenflow/train.hpp,
// tokenflow/checkpoint.hpp).
#include <fmt/format.h>

#include <cmath>

#include "tokenflow/checkpoint.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/train_checkpoint.hpp"
#include "tokenflow/train_config.hpp"

namespace tokenflow {

// ---- checkpoints
// ---------------------------------------------------------------------------------------
namespace {

// The doubles of a struct that a checkpoint holds, in their order in the file: each layout is
// written once, for writing and reading alike.
template <class S, std::size_t N>
using Fields = double S::* const (&)[N];
constexpr double Evaluation::* kEvaluationFields[] = {&Evaluation::w1, &Evaluation::loss, &Evaluation::accuracy};
constexpr double MetricsRow::* kMetricsFields[] = {&MetricsRow::loss, &MetricsRow::test_w1, &MetricsRow::seconds,
                                                   &MetricsRow::test_loss, &MetricsRow::test_accuracy};
// Texts only (appended, so the checkpoints of the other kinds keep their layout): the alignment
// scores of the untrained and independent evaluations and of every metrics row.
constexpr double AlignmentScores::* kAlignmentFields[] = {&AlignmentScores::aer, &AlignmentScores::precision,
                                                          &AlignmentScores::recall};

template <class S, std::size_t N>
void write_fields(ByteWriter& w, const S& s, Fields<S, N> fields) {
  for (double S::* f : fields) w.scalar<double>(s.*f);
}

template <class S, std::size_t N>
void read_fields(ByteReader& r, S& s, Fields<S, N> fields) {
  for (double S::* f : fields) s.*f = r.scalar<double>();
}

template <class S, std::size_t N>
S read_fields(ByteReader& r, Fields<S, N> fields) {
  S s;
  read_fields(r, s, fields);
  return s;
}

// Texts only, appended last (absent from the checkpoints written before they were recorded): the
// link masses of the untrained, independent and best evaluations and of every metrics row.
void write_link_masses(ByteWriter& w, const TrainState& s) {
  for (const Evaluation* e : {&s.untrained, &s.independent, &s.best}) w.scalar<double>(e->alignment.link_mass);
  for (const MetricsRow& m : s.metrics) w.scalar<double>(m.test_alignment.link_mass);
}

void read_link_masses(ByteReader& r, TrainState& s) {
  if (s.metrics.size() + 3 > r.remaining() / 8) r.corrupt("link masses");
  for (Evaluation* e : {&s.untrained, &s.independent, &s.best}) e->alignment.link_mass = r.scalar<double>();
  for (MetricsRow& m : s.metrics) m.test_alignment.link_mass = r.scalar<double>();
}

}  // namespace

void write_checkpoint(const std::filesystem::path& path, const TrainConfig& config,
                      const TrainState& s, const std::filesystem::path& temp_dir) {
  ByteWriter w;
  w.string(to_toml(config));
  w.scalar<std::uint64_t>(config_hash(config));
  w.scalar<std::int64_t>(s.step);
  w.f64_array(s.params.data(), s.params.size());
  w.f64_array(s.adam_m.data(), s.adam_m.size());
  w.f64_array(s.adam_v.data(), s.adam_v.size());
  w.scalar<std::uint64_t>(s.metrics.size());
  for (const MetricsRow& m : s.metrics) {
    w.scalar<std::int64_t>(m.step);
    write_fields(w, m, kMetricsFields);
  }
  write_fields(w, s.untrained, kEvaluationFields);
  write_fields(w, s.independent, kEvaluationFields);
  w.scalar<double>(s.seconds);
  w.scalar<double>(s.loss_sum);
  w.scalar<std::int64_t>(s.loss_count);
  if (config.task.kind == "texts") {
    write_fields(w, s.untrained.alignment, kAlignmentFields);
    write_fields(w, s.independent.alignment, kAlignmentFields);
    for (const MetricsRow& m : s.metrics) write_fields(w, m.test_alignment, kAlignmentFields);
  }
  if (task_reads_pairs(config.task)) {
    w.scalar<std::uint64_t>(s.data_files.size());
    for (const DataFile& f : s.data_files) {
      w.string(f.path);
      w.string(f.key);
      w.scalar<std::uint64_t>(f.hash);
    }
  }
  // The best model so far and the run's warnings (appended last: a checkpoint written before they
  // were recorded resumes with the best taken from its metrics rows' steps onward).
  w.scalar<std::int64_t>(s.best_step);
  write_fields(w, s.best, kEvaluationFields);
  if (config.task.kind == "texts") write_fields(w, s.best.alignment, kAlignmentFields);
  w.f64_array(s.best_params.data(), s.best_params.size());
  w.scalar<std::uint8_t>(s.far_above ? 1 : 0);
  w.scalar<std::uint64_t>(s.warnings.size());
  for (const std::string& line : s.warnings) w.string(line);
  if (config.task.kind == "texts") write_link_masses(w, s);
  write_checkpoint_file(path, CheckpointKind::train, w.data(), temp_dir);
}

std::string read_checkpoint_config(const std::filesystem::path& path) {
  const std::string payload = read_checkpoint_file(path, CheckpointKind::train);
  return ByteReader(payload, path.string()).string();
}

TrainState read_checkpoint(const std::filesystem::path& path, const TrainConfig& config) {
  const std::string payload = read_checkpoint_file(path, CheckpointKind::train);
  ByteReader r(payload, path.string());
  r.string();  // the configuration
  const std::uint64_t hash = r.scalar<std::uint64_t>();
  if (hash != config_hash(config))
    r.fail(fmt::format(
        "belongs to another configuration (hash {:016x}, this run {:016x}); use the run's "
        "config, or a new --out",
        hash, config_hash(config)));
  // The seal is a checksum anyone can recompute: every field is checked like user input, and
  // every count against the bytes the file holds before anything is allocated.
  auto bad = [&](const std::string& field, const std::string& what) {
    r.fail("is not a valid checkpoint: " + field + " " + what + "; delete it to start the run afresh");
  };
  const ModelSize size = model_size(config.model);
  if (3 * 8 * size.parameters > static_cast<long double>(r.remaining()))
    r.fail("is truncated: its configuration's model needs more parameters than the file holds");
  TrainState s;
  s.step = r.scalar<std::int64_t>();
  if (s.step < 0) bad("the step", "is negative");
  s.params = r.f64_array();
  s.adam_m = r.f64_array();
  s.adam_v = r.f64_array();
  const auto rows = r.scalar<std::uint64_t>();
  if (rows > r.remaining() / 48) r.corrupt("metrics count");
  s.metrics.reserve(static_cast<std::size_t>(rows));
  for (std::uint64_t i = 0; i < rows; ++i) {
    MetricsRow m;
    m.step = r.scalar<std::int64_t>();
    read_fields(r, m, kMetricsFields);
    if (m.step < 0 || m.step > s.step || (!s.metrics.empty() && m.step < s.metrics.back().step))
      bad("a metrics row", "has a step out of order (" + std::to_string(m.step) + ")");
    s.metrics.push_back(m);
  }
  s.untrained = read_fields(r, kEvaluationFields);
  s.independent = read_fields(r, kEvaluationFields);
  s.seconds = r.scalar<double>();
  s.loss_sum = r.scalar<double>();
  s.loss_count = r.scalar<std::int64_t>();
  if (config.task.kind == "texts") {
    if (s.metrics.size() + 2 > r.remaining() / 24) r.corrupt("alignment scores");
    s.untrained.alignment = read_fields(r, kAlignmentFields);
    s.independent.alignment = read_fields(r, kAlignmentFields);
    for (MetricsRow& m : s.metrics) m.test_alignment = read_fields(r, kAlignmentFields);
  }
  // The data files (absent from the dataset checkpoints written before they were recorded).
  if (task_reads_pairs(config.task) && r.remaining() > 0) {
    const auto files = r.scalar<std::uint64_t>();
    if (files > r.remaining() / 24) r.corrupt("data file count");  // two lengths and a hash each
    for (std::uint64_t i = 0; i < files; ++i) {
      DataFile f;
      f.path = r.string();
      f.key = r.string(64);
      f.hash = r.scalar<std::uint64_t>();
      s.data_files.push_back(std::move(f));
    }
  }
  if (r.remaining() > 0) {  // the best model and the warnings (absent from older checkpoints)
    s.best_step = r.scalar<std::int64_t>();
    if (s.best_step < 0 || s.best_step > s.step) bad("the best step", "is out of range");
    s.best = read_fields(r, kEvaluationFields);
    if (config.task.kind == "texts") s.best.alignment = read_fields(r, kAlignmentFields);
    s.best_params = r.f64_array();
    const auto far_above = r.scalar<std::uint8_t>();
    if (far_above > 1) r.corrupt("far-above flag");
    s.far_above = far_above == 1;
    const auto warnings = r.scalar<std::uint64_t>();
    if (warnings > r.remaining() / 8) r.corrupt("warning count");  // a length each
    for (std::uint64_t i = 0; i < warnings; ++i) s.warnings.push_back(r.string(4096));
    if (config.task.kind == "texts" && r.remaining() > 0) read_link_masses(r, s);
  } else {  // an older checkpoint: the best is its parameters now, as far as it can tell
    s.best_step = s.step;
    s.best_params = s.params;
    s.best.loss = s.metrics.empty() ? std::nan("") : s.metrics.back().test_loss;
    if (!s.metrics.empty()) {
      s.best.w1 = s.metrics.back().test_w1;
      s.best.accuracy = s.metrics.back().test_accuracy;
      s.best.alignment = s.metrics.back().test_alignment;
    }
  }
  r.finish();
  const std::size_t P = ParameterLayout(config.model).size();
  if (s.params.size() != P || s.adam_m.size() != P || s.adam_v.size() != P || s.best_params.size() != P)
    r.fail("its state does not match its configuration");
  if (s.step > config.train.steps)
    r.fail(fmt::format("is at step {}, beyond train.steps = {}", s.step, config.train.steps));
  for (std::size_t i = 0; i < P; ++i) {
    if (!std::isfinite(s.params[i])) bad("the parameters", "are not finite");
    if (!std::isfinite(s.adam_m[i])) bad("the first moments", "are not finite");
    if (!std::isfinite(s.adam_v[i]) || s.adam_v[i] < 0.0) bad("the second moments", "must be finite and >= 0");
    if (!std::isfinite(s.best_params[i])) bad("the best parameters", "are not finite");
  }
  if (!std::isfinite(s.seconds) || s.seconds < 0.0) bad("the seconds", "must be finite and >= 0");
  if (!std::isfinite(s.loss_sum)) bad("the loss sum", "is not finite");
  if (s.loss_count < 0 || s.loss_count > s.step) bad("the loss count", "is out of range");
  return s;
}

}  // namespace tokenflow
