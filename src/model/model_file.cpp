// model.bin: the trained parameters with their configuration (format in tokenflow/model.hpp).
#include <cmath>
#include <cstdio>

#include "binary.hpp"
#include "tokenflow/durable_file.hpp"
#include "tokenflow/model.hpp"

namespace tokenflow {

namespace {
constexpr char kModelMagic[8] = {'T', 'F', 'M', 'O', 'D', 'E', 'L', '1'};
}

void save_model(const std::filesystem::path& path, const SinkhornTransformer& model) {
  const ParameterLayout layout(model.config);
  if (model.params.size() != layout.size())
    throw std::logic_error("save_model: parameter count does not match the layout");
  binary::Writer w;
  w.bytes(kModelMagic, 8);
  w.str(model.config_toml);
  w.u64(layout.tensors().size());
  for (const ParameterTensor& t : layout.tensors()) {
    w.str(t.name);
    w.u64(t.shape.size());
    for (int s : t.shape) w.u64(static_cast<std::uint64_t>(s));
    w.u64(t.offset);
  }
  w.f64_array(model.params.data(), model.params.size());
  replace_file_atomically(path, w.seal());
}

SinkhornTransformer load_model(const std::filesystem::path& path) {
  binary::Reader r(binary::read_file(path, "--model"), path.string(), kModelMagic);
  SinkhornTransformer model;
  model.config_toml = r.str("the configuration");
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
  const std::uint64_t count = r.u64("the tensor count");
  if (count != layout.tensors().size()) r.fail("its tensors do not match its configuration");
  for (const ParameterTensor& t : layout.tensors()) {
    std::string name = r.str("a tensor name", 4096);
    if (name.size() > 80) name = name.substr(0, 80) + "...";  // quoted in messages
    const std::uint64_t rank = r.u64("a tensor rank");
    if (name != t.name || rank != t.shape.size())
      r.fail("tensor '" + name + "' does not match its configuration");
    for (int s : t.shape)
      if (r.u64("a tensor shape") != static_cast<std::uint64_t>(s))
        r.fail("tensor '" + name + "' has the wrong shape");
    if (r.u64("a tensor offset") != t.offset) r.fail("tensor '" + name + "' has the wrong offset");
  }
  model.params = r.f64_array("the parameters");
  r.finish();
  if (model.params.size() != layout.size()) r.fail("has the wrong number of parameters");
  for (double v : model.params)
    if (!std::isfinite(v)) r.fail("has a non-finite parameter");
  return model;
}

}  // namespace tokenflow
