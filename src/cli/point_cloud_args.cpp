#include "point_cloud_args.hpp"

#include "tokenflow/error.hpp"
#include "tokenflow/io.hpp"
#include "tokenflow/ot_solve.hpp"

namespace tokenflow::cli {

Measure<double> read_point_cloud(const std::string& points_path, const std::string& points_flag,
                                 const std::string& weights_path, const std::string& weights_flag,
                                 const std::string& positions_path,
                                 const std::string& positions_flag, bool normalize) {
  Points<double> x = read_points(points_path, points_flag);
  const Eigen::Index n = x.rows();
  Eigen::VectorXd a, pos;
  if (!weights_path.empty()) a = read_vector(weights_path, weights_flag, n);
  if (!positions_path.empty()) pos = read_vector(positions_path, positions_flag, n);
  try {
    return make_transport_measure(std::move(x), std::move(a), std::move(pos), normalize);
  } catch (const InputError& e) {
    // make_transport_measure names its arguments ("weights", "positions"); say which file and flag.
    if (e.key() == "weights") throw InputError(weights_path, weights_flag, e.detail());
    if (e.key() == "positions") throw InputError(positions_path, positions_flag, e.detail());
    throw InputError(points_path, points_flag, e.detail());
  }
}

}  // namespace tokenflow::cli
