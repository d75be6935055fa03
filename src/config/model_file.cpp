// model.bin: the trained parameters with their configuration (format in tokenflow/model_file.hpp).
#include <cmath>
#include <cstdio>

#include "tokenflow/durable_file.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/train_config.hpp"
#include "tokenflow/input_file.hpp"
#include "tokenflow/model_file.hpp"
#include "tokenflow/records.hpp"

namespace tokenflow {

namespace {
const std::string kModelMagic = "TFMODEL1";  // then the records, then the FNV-1a seal
}

void save_model(const std::filesystem::path& path, const SinkhornTransformer& model) {
  const ParameterLayout layout(model.config);
  if (model.params.size() != layout.size())
    throw std::logic_error("save_model: parameter count does not match the layout");
  ByteWriter w;
  w.bytes(kModelMagic.data(), kModelMagic.size());
  w.string(model.config_toml.empty() ? model_toml(model.config) : model.config_toml);
  w.scalar<std::uint64_t>(layout.tensors().size());
  for (const ParameterTensor& t : layout.tensors()) {
    w.string(t.name);
    w.scalar<std::uint64_t>(t.shape.size());
    for (int s : t.shape) w.scalar<std::uint64_t>(static_cast<std::uint64_t>(s));
    w.scalar<std::uint64_t>(t.offset);
  }
  w.f64_array(model.params.data(), model.params.size());
  replace_file_atomically(path, w.seal());
}

SinkhornTransformer load_model(const std::filesystem::path& path) {
  // A regular file only, no larger than this machine's memory (tokenflow/input_file.hpp).
  const std::string bytes = read_input_file(path, "--model");
  ByteReader r(bytes, path.string(), "", "");
  r.open_sealed(kModelMagic, "model");
  SinkhornTransformer model;
  model.config_toml = r.string();
  Config config;
  try {
    config = Config::from_text(model.config_toml, path.string());
  } catch (const InputError& e) {
    r.fail("its configuration does not parse: " + e.detail());
  }
  const int d = config.get_int32("model.d", 0);
  if (d < 1) r.fail("its configuration lacks model.d");
  model.config = read_model_config(config, d);  // refuses a model larger than this machine's memory
  // The sizes its configuration implies must fit in the bytes the file holds (each tensor record
  // takes at least 32 bytes, each parameter 8) before the layout and the parameters are allocated:
  // a 563-byte file saying model.layers = 200000000 is refused here, not after gigabytes.
  const ModelSize size = model_size(model.config);
  if (8 * size.parameters + 32 * size.tensors + 16 > static_cast<long double>(r.remaining())) {
    char count[32];
    std::snprintf(count, sizeof count, "%.3Lg", size.parameters);
    r.fail(std::string("is truncated or inconsistent: its configuration (model.width = ") +
           std::to_string(model.config.width) + ", model.layers = " + std::to_string(model.config.layers) +
           ", model.mlp_ratio = " + std::to_string(model.config.mlp_ratio) + ") describes " + count +
           " parameters, more than the " + std::to_string(r.remaining()) + " bytes left in the file hold");
  }
  const ParameterLayout layout(model.config);
  const auto count = r.scalar<std::uint64_t>();
  if (count != layout.tensors().size()) r.fail("its tensors do not match its configuration");
  for (const ParameterTensor& t : layout.tensors()) {
    std::string name = r.string(4096);
    if (name.size() > 80) name = name.substr(0, 80) + "...";  // quoted in messages
    const auto rank = r.scalar<std::uint64_t>();
    if (name != t.name || rank != t.shape.size())
      r.fail("tensor '" + name + "' does not match its configuration");
    for (int s : t.shape)
      if (r.scalar<std::uint64_t>() != static_cast<std::uint64_t>(s))
        r.fail("tensor '" + name + "' has the wrong shape");
    if (r.scalar<std::uint64_t>() != t.offset) r.fail("tensor '" + name + "' has the wrong offset");
  }
  model.params = r.f64_array();
  r.finish();
  if (model.params.size() != layout.size()) r.fail("has the wrong number of parameters");
  for (double v : model.params)
    if (!std::isfinite(v)) r.fail("has a non-finite parameter");
  return model;
}

}  // namespace tokenflow
