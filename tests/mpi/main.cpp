// The MPI tests' main: starts MPI (under mpirun), gives every rank the same random seed (rank 0's)
// and lets rank 0 alone print GoogleTest's report (each rank still runs and checks every test; a
// failure on another rank is listed by that rank and fails the run through every rank's exit code).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "../../src/distributed/world/world.hpp"

int main(int argc, char** argv) {
  namespace dist = tokenflow::distributed;
  dist::init_world(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (const tokenflow::Communicator* comm = dist::world()) {
    std::uint64_t seed = 0;
    if (const char* s = std::getenv("TOKENFLOW_TEST_SEED"))
      seed = std::stoull(s);
    else
      seed = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    comm->broadcast(&seed, sizeof seed, 0);
    setenv("TOKENFLOW_TEST_SEED", std::to_string(seed).c_str(), 1);
    if (comm->rank() == 0)
      std::printf("[ tokenflow ] random seed base %llu on %d ranks (set TOKENFLOW_TEST_SEED to replay)\n",
                  static_cast<unsigned long long>(seed), comm->size());
    else
      delete ::testing::UnitTest::GetInstance()->listeners().Release(
          ::testing::UnitTest::GetInstance()->listeners().default_result_printer());
  }
  const int failed = RUN_ALL_TESTS();
  if (dist::world() != nullptr && !dist::is_root() && failed != 0) {
    const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
    for (int i = 0; i < unit.total_test_suite_count(); ++i) {
      const ::testing::TestSuite& suite = *unit.GetTestSuite(i);
      for (int j = 0; j < suite.total_test_count(); ++j)
        if (suite.GetTestInfo(j)->result()->Failed())
          std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", dist::world()->rank(), suite.name(), suite.GetTestInfo(j)->name());
    }
  }
  // Every rank must agree, so that mpirun's status reports a failure on any rank.
  const int any_failed = dist::world() ? dist::world()->max_over_ranks(failed) : failed;
  dist::finalize_world();
  return any_failed;
}
