// libFuzzer target: the model.bin reader (load_model) and inference with what it accepts. The
// input is a model file without its trailing checksum (the harness appends it: a crafted file
// carries a valid one). Any input must load or end in InputError; a crash, a sanitizer report,
// another exception, or a load that allocates beyond what the file holds is a finding.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "fuzz_file.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/model.hpp"
#include "tokenflow/model_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > (1u << 20)) return 0;
  static fuzz::MemoryFile file;
  const std::string& path = file.write(fuzz::sealed(std::string(reinterpret_cast<const char*>(data), size)));
  try {
    const tokenflow::SinkhornTransformer model = tokenflow::load_model(path);
    // What loads must hold exactly its layout's parameters, all finite.
    if (model.params.size() != tokenflow::ParameterLayout(model.config).size()) __builtin_trap();
    // Inference on a tiny pair, for small models only (the cost grows with layers x width^2).
    const tokenflow::ModelSize s = tokenflow::model_size(model.config);
    if (s.parameters <= 200000 && model.config.d <= 64 && model.config.sinkhorn_iters <= 1000) {
      tokenflow::Points<double> x(2, model.config.d), y(3, model.config.d);
      for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = 0.1 * static_cast<double>(i) - 0.3;
      for (Eigen::Index i = 0; i < y.size(); ++i) y.data()[i] = 0.2 - 0.05 * static_cast<double>(i);
      try {
        const tokenflow::RowMatrix plan = tokenflow::couple(model, x, y);
        if (plan.rows() != 2 || plan.cols() != 3) __builtin_trap();
      } catch (const std::runtime_error&) {
        // A model of finite but enormous parameters may give a non-finite coupling, which the
        // library may report as a run-time error: not an input-reading failure.
      }
    }
  } catch (const tokenflow::InputError&) {
  }
  return 0;
}
