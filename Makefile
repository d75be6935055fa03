# tokenflow: two commands on a fresh Debian 12 machine.
#   make demo   installs what is missing, builds, and runs the main job (tokenflow demo)
#   make test   installs what is missing, builds, and runs the C++ and Python suites
#   make check  make test, plus the fuzzers, the sanitizer build and the documentation site (what CI runs)
#   make docs   the documentation site (build/docs/html/index.html), its gallery run as it builds
# Packages come from Debian only (apt-get update first, then only what is missing).

SHELL := /bin/bash
PYTHON := /usr/bin/python3
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)

BUILD_DEPS := cmake make ninja-build g++ pkg-config libeigen3-dev libtomlplusplus-dev nlohmann-json3-dev \
              libcli11-dev libfmt-dev liblemon-dev libzip-dev libgtest-dev libgmock-dev libbenchmark-dev \
              pybind11-dev python3-dev python3-numpy libopenmpi-dev openmpi-bin
TEST_DEPS  := $(BUILD_DEPS) python3-venv python3-setuptools python3-pytest python3-hypothesis python3-scipy python3-pot python3-matplotlib python3-torch chromium
# universal-ctags: tests/python/test_function_lengths.py (no function in src/ over 100 lines).
TEST_DEPS  += universal-ctags
# make check adds the fuzzers and the sanitizer build (clang: libFuzzer, and its OpenMP runtime).
# make docs: Sphinx with furo, myst-parser, sphinx-gallery, breathe over doxygen (all offline); the
# gallery draws with matplotlib and compares with POT (its PyTorch example is skipped without torch).
DOCS_DEPS  := $(BUILD_DEPS) python3-sphinx furo python3-myst-parser python3-sphinx-gallery python3-breathe doxygen \
              python3-matplotlib python3-pot
CHECK_DEPS := $(TEST_DEPS) $(DOCS_DEPS) clang-14 libclang-rt-14-dev libomp-14-dev
DEMO_DEPS  := $(BUILD_DEPS) python3-matplotlib
# make bench: PyTorch and NumPy+OpenBLAS are the peers (bench/compare.py loads OpenBLAS for NumPy
# even when it is not the selected libblas.so.3); SLEEF is only compared in bench/bench_exp.cpp.
BENCH_DEPS := $(TEST_DEPS) libopenblas0-pthread libsleef-dev

# Tests share 2 cores between two test processes: OpenMP threads that spin while waiting make
# oversubscribed runs many times slower, so waiting threads sleep instead.
export OMP_WAIT_POLICY ?= passive

CMAKE_FLAGS := -DCMAKE_BUILD_TYPE=Release $(if $(CI),-DTOKENFLOW_WERROR=ON) $(CMAKE_EXTRA)
# $(call generator,dir): Ninja for a new build folder (it keeps both cores busy across targets, where
# make finishes one target before the next); a folder configured before keeps its generator.
generator = $(if $(wildcard $(1)/CMakeCache.txt),,-G Ninja)

# $(call ensure,packages): install the packages that are not installed yet.
define ensure
	@missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "tokenflow: installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi
endef

# CI's fuzzing is a regression pass from the committed corpora, sized to fit CI's time: 15 s per
# reader beside 110 s of the CLI fuzzer. A deeper search is the same targets with more time
# (make fuzz FUZZ_SECONDS=600, make cli-fuzz CLI_FUZZ_SECONDS=1800).
FUZZ_SECONDS ?= 15

.PHONY: all deps build build-tests test check docs test-cpp test-long test-docs test-python build-fuzz fuzz cli-fuzz sanitize demo bench docs-runs docs-gallery docs-numbers conformance config-docs install uninstall clean format

all: build

deps:
	$(call ensure,$(BUILD_DEPS))

build: deps
	cmake -S . -B $(BUILD_DIR) $(call generator,$(BUILD_DIR)) $(CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD_DIR) -j$(JOBS)

# The fast tier (README's test command): the release build of what the suites run (the CLI, the
# Python module, the test binaries; not the benchmarks), then the C++ and the Python suites.
# The two suites run side by side: pytest keeps about one core busy (most of its CPU is in the CLI
# processes it starts) and ctest, one test at a time, the other. Together they took 142 s here (pytest
# done after 98 s, ctest after 142 s; measured 2026-12-04, AMD EPYC Zen 3); ctest -j2 beside pytest
# took 138 s, within the noise.
test:
	$(call ensure,$(TEST_DEPS))
	@$(MAKE) --no-print-directory build-tests
	@$(MAKE) --no-print-directory -j2 --output-sync=target test-cpp test-python CTEST_JOBS=1

build-tests: deps
	cmake -S . -B $(BUILD_DIR) $(call generator,$(BUILD_DIR)) $(CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD_DIR) -j$(JOBS) --target tokenflow_test_targets

# Everything CI runs (.ci/run): make test, the long statistical tests, the documentation site, the
# fuzzers and the sanitizer build.
# What each stage costs on 2 cores (AMD EPYC Zen 3), from a fresh-clone .ci/run of 23 min 31 s with
# the stages one after the other (2026-12-04; compile figures are sums of ninja's per-file times):
#   release build of tokenflow_test_targets   719 s of compiles, 6 min of wall time (library 331 s,
#                                              unit tests 214 s at -O1, CLI 120 s)
#   test-cpp beside test-python                126 s (ctest, one test at a time) and 116 s (pytest)
#   test-long, test-docs beside docs           88 s (test-docs at DOC_EXAMPLE_SIZES=ci: 85 s, of it
#                                              metastability --long 47 s; CI_SIZES runs --tour,
#                                              --quick, 300 steps: the long examples as written take
#                                              over 25 min)
#   build-fuzz (clang, ASan + UBSan, -O1)      1024 s of compiles, 8 min 40 s (library 591 s, unit
#                                              tests 321 s, CLI at -O0 72 s); both cores busy to the end
#   fuzz and cli-fuzz, side by side            117 s
#   sanitize: the unit tests under ASan        186 s (without SANITIZE_SKIP's studies)
# build-fuzz does not start beside the suites at a low priority. Tried once (nice 19, in the same
# scheduler autogroup): the suites and the documentation took 78 s longer, while build-fuzz
# compiled 14 of its 105 files; no clear gain, so the stages run one after the other.
# The fuzzers and the CLI fuzzer each keep one core busy (libFuzzer runs one process, the CLI
# fuzzer one case at a time on one thread), so check runs them side by side, after build-fuzz.
# Each stage prints its start time (the CI log is then a profile of the run).
check:
	$(call ensure,$(CHECK_DEPS))
	@echo "tokenflow check: test from $$(date +%T)"
	@$(MAKE) --no-print-directory test
	@echo "tokenflow check: test-long, test-docs and docs from $$(date +%T)"
	@$(MAKE) --no-print-directory -j2 --output-sync=target test-long test-docs docs DOC_EXAMPLES=long DOC_EXAMPLE_SIZES=ci
	@echo "tokenflow check: build-fuzz from $$(date +%T)"
	@$(MAKE) --no-print-directory build-fuzz
	@echo "tokenflow check: fuzz and cli-fuzz from $$(date +%T)"
	@$(MAKE) --no-print-directory -j2 --output-sync=target fuzz cli-fuzz
	@echo "tokenflow check: sanitize from $$(date +%T)"
	@$(MAKE) --no-print-directory sanitize
	@echo "tokenflow check: done at $$(date +%T)"

# The documentation site, from docs/ (docs/conf.py): doxygen's XML of include/tokenflow, then Sphinx
# with warnings as errors, which runs every example of examples/ (the gallery) against this build;
# the pages of the slow reproductions read their stored results instead (make docs-gallery).
# Offline: no intersphinx, Debian's packages only. About two minutes on 2 cores.
docs:
	$(call ensure,$(DOCS_DEPS))
	cmake -S . -B $(BUILD_DIR) $(call generator,$(BUILD_DIR)) $(CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD_DIR) -j$(JOBS) --target tokenflow_cli _tokenflow tokenflow_python_files
	mkdir -p $(BUILD_DIR)/docs/doxygen
	TOKENFLOW_DOXYGEN_OUT=$(BUILD_DIR)/docs/doxygen doxygen docs/Doxyfile
	TOKENFLOW_BUILD_DIR=$(BUILD_DIR) TOKENFLOW_DOXYGEN_XML=$(abspath $(BUILD_DIR))/docs/doxygen/xml \
	  $(PYTHON) -m sphinx -W --keep-going -q -b html -d $(BUILD_DIR)/docs/doctrees docs $(BUILD_DIR)/docs/html
	@echo "tokenflow: the site is $(BUILD_DIR)/docs/html/index.html"

# The statistical studies among the C++ tests (particles against the moment ODE; the n^{-1/2} rate
# of the mean-field error; 2.3 s and 1.2 s, measured 2026-12-04): make check runs them, make test
# does not.
LONG_TESTS := GaussianCheck|MeanField.ErrorsShrinkAtTheRateOneOverSqrtN

CTEST_JOBS ?= 2
test-cpp:
	cd $(BUILD_DIR) && ctest --output-on-failure -j$(CTEST_JOBS) -E "$(LONG_TESTS)"

test-long:
	cd $(BUILD_DIR) && ctest --output-on-failure -j2 -R "$(LONG_TESTS)"

# Every example of README.md and docs/, the long ones included (the fast tier skips those over 20 s).
# make check runs the long ones only (DOC_EXAMPLES=long): its make test ran the others; and it runs
# the long studies that a C++ test already checks at full strength at a smaller size
# (DOC_EXAMPLE_SIZES=ci, tests/python/test_doc_examples.py's CI_SIZES). make test-docs runs all
# as written.
DOC_EXAMPLES ?= all
DOC_EXAMPLE_SIZES ?= written
test-docs:
	PYTHONPATH=$(BUILD_DIR)/python TOKENFLOW_CLI=$(BUILD_DIR)/tokenflow TOKENFLOW_DOC_EXAMPLES=$(DOC_EXAMPLES) \
	  TOKENFLOW_DOC_EXAMPLE_SIZES=$(DOC_EXAMPLE_SIZES) \
	  $(PYTHON) -m pytest -q --durations=15 tests/python/test_doc_examples.py

# The demo report's screenshot (headless Chromium) is left at $(BUILD_DIR)/report-screenshot.png.
test-python:
	PYTHONPATH=$(BUILD_DIR)/python TOKENFLOW_CLI=$(BUILD_DIR)/tokenflow TOKENFLOW_SCREENSHOT_DIR=$(abspath $(BUILD_DIR)) \
	  $(PYTHON) -m pytest -q --durations=15 tests/python

# make check's second build, build-fuzz: clang with AddressSanitizer and UBSan at -O1, without MPI
# (OpenMPI's own allocations would read as leaks; so it also checks that the build without MPI
# works and refuses a run on several ranks, test NoMpiMessage). The fuzzers and the unit tests share
# it, so the library is compiled once for both.
SANITIZER_FLAGS := -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" -DTOKENFLOW_FUZZ=ON \
  -DTOKENFLOW_PYTHON=OFF -DTOKENFLOW_BENCH=OFF -DTOKENFLOW_MPI=OFF

# The sanitizer tree's configure step, shared by build-fuzz, fuzz and sanitize.
CONFIGURE_FUZZ = cmake -S . -B build-fuzz $(call generator,build-fuzz) $(SANITIZER_FLAGS) >/dev/null

# libFuzzer on every reader of input files (configs, .npy arrays, model.bin, simulate and training
# checkpoints, word vectors, aligned texts) for FUZZ_SECONDS each, from the committed corpus (copied, so the
# committed corpus does not change); ASan and UBSan are on. Crashes are saved in build-fuzz/.
FUZZ_TARGETS := config npy model checkpoint vectors texts dataset
# The whole sanitizer tree (fuzzers, unit tests, CLI) in one build, both cores busy throughout.
build-fuzz:
	$(CONFIGURE_FUZZ)
	cmake --build build-fuzz -j$(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS)) tokenflow_tests tokenflow_cli

fuzz:
	$(CONFIGURE_FUZZ)
	cmake --build build-fuzz -j$(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS))
	@for t in $(FUZZ_TARGETS); do \
	  work=$$(mktemp -d) && cp tests/fuzz/corpus/$$t/* $$work/ && \
	  echo "fuzzing the $$t reader for $(FUZZ_SECONDS) s" && \
	  build-fuzz/tests/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	    -artifact_prefix=build-fuzz/crash-$$t- -print_final_stats=1 $$work 2>&1 | grep -E "^(stat::number_of_executed_units|INFO: Running|==.*ERROR|SUMMARY)" ; \
	  status=$${PIPESTATUS[0]}; rm -rf $$work; [ $$status -eq 0 ] || exit $$status; \
	done

# The command-line fuzzer (tests/fuzz/cli_fuzz.py) on the release CLI for CLI_FUZZ_SECONDS: random
# argv built from every command's --help and config keys, with hostile values, keys and files; it
# checks exit codes, bounded stderr, that nothing outside --out changes and that a user's file in
# --out survives. The seed is fresh and printed; a failure prints the line that replays it.
CLI_FUZZ_SECONDS ?= 110
cli-fuzz:
	$(PYTHON) tests/fuzz/cli_fuzz.py --cli $(BUILD_DIR)/tokenflow --seconds $(CLI_FUZZ_SECONDS)

# The unit tests under AddressSanitizer and UBSan, in build-fuzz. Skipped: the install test, the
# killed-run test (its kill must land between two checkpoints), and the long numerical studies
# (SANITIZE_SKIP: statistical sweeps and convergence studies that repeat, at larger sizes, the
# memory paths of the short tests of the same code, which run here: Sinkhorn's dense, online and
# kernel operators (Sinkhorn.*, KernelSinkhorn.*), the fast summation's grid
# (FastGaussContract.*, GridSoftMin.SoftMins*), the output folders (OutputDir.*)).
SANITIZE_SKIP := GaussianCheck|MeanField.ErrorsShrinkAtTheRateOneOverSqrtN|InstallAndFindPackage|KilledCliRun
SANITIZE_SKIP := $(SANITIZE_SKIP)|OutputDirCli.ReproduceAndDemoKeepTheUsersSubfolders|GaussianRatesMonteCarlo.Sinkhorn
SANITIZE_SKIP := $(SANITIZE_SKIP)|FastSummationField.MatchesReferenceWithinTheContract|Sinkhorn.BudgetReturnsBestStage
SANITIZE_SKIP := $(SANITIZE_SKIP)|Sinkhorn.PotStabilizationProblemConverges|Sinkhorn.DefaultConvergesWhereThePlainLoopDoes
SANITIZE_SKIP := $(SANITIZE_SKIP)|GridSoftMin.SinkhornThroughTheGridReportsAnUpperBoundOfItsPlansError
SANITIZE_SKIP := $(SANITIZE_SKIP)|SinkhornAcceleration.DefaultNeverWorseThanThePlainLoopOnTheSameBudget
SANITIZE_SKIP := $(SANITIZE_SKIP)|SinkhornAcceleration.PotStabilizationProblemConvergesAtSmallEpsilon
SANITIZE_SKIP := $(SANITIZE_SKIP)|SinkhornSchedule.IntermediateStagesLeaveHalfTheBudgetToTheFinalStage
# Under ASan 53 s and 17 s (0.7 to 11 s and about 2 s in the release build): the symmetric solve on the
# grid repeats the memory paths of GridSoftMin.SoftMins* and Sinkhorn.*, and the F32 case of the
# Sinkhorn attention on the grid runs the F64 case's code (which stays here, with
# AutoTakesTheGridForSinkhornWhereItApplies).
SANITIZE_SKIP := $(SANITIZE_SKIP)|GridSoftMin.SymmetricSinkhornConfirmsItsMeasuredError
SANITIZE_SKIP := $(SANITIZE_SKIP)|FastSummationField.SinkhornMatchesItsPotentialsWithinTheContractF32
# The d = 64 attention cases run the kernel code of the d = 16 cases, which run here; under ASan
# they take 10 to 19 s each (the reference's per-pair Eigen temporaries), 0.4 s in the release build.
SANITIZE_SKIP := $(SANITIZE_SKIP)|AttentionAgainstReference.*d64
sanitize:
	$(CONFIGURE_FUZZ)
	cmake --build build-fuzz -j$(JOBS) --target tokenflow_tests tokenflow_cli
	cd build-fuzz && ASAN_OPTIONS=detect_leaks=1 OMP_NUM_THREADS=2 ctest -j2 --output-on-failure \
	  -E "$(SANITIZE_SKIP)"

# Builds only what the demo runs: the CLI and the Python package that draws the figures.
demo:
	$(call ensure,$(DEMO_DEPS))
	cmake -S . -B $(BUILD_DIR) $(call generator,$(BUILD_DIR)) $(CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD_DIR) -j$(JOBS) --target tokenflow_cli _tokenflow tokenflow_python_files
	$(BUILD_DIR)/tokenflow demo --out out/demo

bench:
	$(call ensure,$(BENCH_DEPS))
	@$(MAKE) --no-print-directory build
	$(PYTHON) bench/compare.py --build $(BUILD_DIR) --json $(BUILD_DIR)/bench.json

# make docs-numbers: README's and docs' measured tables and numbers, rewritten from the last
# `make bench` ($(BUILD_DIR)/bench.json), `bench/ot_vs_pot.py --json $(BUILD_DIR)/ot_vs_pot.json`,
# `bench/ot_vs_pot.py --online-rate N --json $(BUILD_DIR)/online_rate.json`,
# `bench/sinkhorn_grad.py --json $(BUILD_DIR)/sinkhorn_grad.json`,
# `bench/train_vs_torch.py --json $(BUILD_DIR)/train_vs_torch.json` and `make demo` (out/demo), and the
# numbers and tables of the commands the docs show (`make docs-runs` first),
# each stamped with its date and CPU (bench/update_docs.py says how the places are marked).
docs-numbers:
	$(PYTHON) bench/update_docs.py $(if $(wildcard $(BUILD_DIR)/bench.json),--bench $(BUILD_DIR)/bench.json) \
	  $(if $(wildcard $(BUILD_DIR)/ot_vs_pot.json),--ot-vs-pot $(BUILD_DIR)/ot_vs_pot.json) \
	  $(if $(wildcard $(BUILD_DIR)/online_rate.json),--online-rate $(BUILD_DIR)/online_rate.json) \
	  $(if $(wildcard $(BUILD_DIR)/unbalanced_vs_pot.json),--unbalanced-vs-pot $(BUILD_DIR)/unbalanced_vs_pot.json) \
	  $(if $(wildcard $(BUILD_DIR)/sinkhorn_grad.json),--training $(BUILD_DIR)/sinkhorn_grad.json) \
	  $(if $(wildcard $(BUILD_DIR)/train_vs_torch.json),--train-vs-torch $(BUILD_DIR)/train_vs_torch.json) \
	  $(if $(wildcard out/demo/summary.json),--reproductions out/demo) --runs

# make docs-runs: the commands the docs show whose numbers they quote, run as written (into out/),
# the README's example, which draws the README's figure (docs/figures/readme-tokens.png), and the
# gallery's stored reproductions (make docs-gallery).
docs-runs: build
	TOKENFLOW_CLI=$(BUILD_DIR)/tokenflow $(PYTHON) bench/doc_examples.py
	PYTHONPATH=$(BUILD_DIR)/python $(PYTHON) bench/readme_figure.py
	@$(MAKE) --no-print-directory docs-gallery

# make docs-gallery: the reproductions whose gallery pages show a stored result (too slow for the
# site's build), run at the sizes their result needs; their figures, figures.json and a stamp
# (command, commit, CPU, date, wall time) go to docs/figures/gallery/NAME/ (bench/gallery_results.py).
docs-gallery: build
	$(PYTHON) bench/gallery_results.py --cli $(BUILD_DIR)/tokenflow

# make conformance: an external check of docs/design.md's contract, kept outside this repository
# (CONFORMANCE_CHECK, default ../shared/conformance/check); without it the target stops at once.
CONFORMANCE_CHECK ?= ../shared/conformance/check
conformance:
	@[ -x "$(CONFORMANCE_CHECK)" ] || { echo "make conformance: needs the external contract checker $(CONFORMANCE_CHECK), which is not part of this repository (set CONFORMANCE_CHECK=path)" >&2; exit 2; }
	@$(MAKE) --no-print-directory build
	$(CONFORMANCE_CHECK)

# docs/config.md: every config key of every command, generated from the schemas in the source.
config-docs: build
	$(BUILD_DIR)/tokenflow config --markdown > docs/config.md

# make install: tokenflow in PREFIX/bin (default /usr/local/bin, on PATH), the Python package where
# /usr/bin/python3 finds it from any folder, the library, headers and CMake package
# (find_package(tokenflow)). make uninstall removes exactly the files the last install wrote
# (cmake's install_manifest.txt), and nothing else.
install: build
	cmake --install $(BUILD_DIR) $(if $(PREFIX),--prefix $(PREFIX))

uninstall:
	@test -f $(BUILD_DIR)/install_manifest.txt || { echo "tokenflow: nothing to uninstall ($(BUILD_DIR)/install_manifest.txt not found)"; exit 1; }
	@while IFS= read -r f || [ -n "$$f" ]; do rm -f -- "$$f" && echo "removed $$f"; done < $(BUILD_DIR)/install_manifest.txt
	@# tokenflow's own folders (the package and its subpackages, include/tokenflow, lib/cmake/tokenflow),
	@# once empty, the deepest first; the package's __pycache__ folders are Python's compilation of the
	@# installed files. Other folders stay.
	@while IFS= read -r f || [ -n "$$f" ]; do dirname -- "$$f"; done < $(BUILD_DIR)/install_manifest.txt | sort -ru | \
	  while IFS= read -r d; do case "$$d" in */tokenflow|*/tokenflow/*) \
	  rm -rf -- "$$d/__pycache__"; rmdir -- "$$d" 2>/dev/null || true;; esac; done
	@rm -f $(BUILD_DIR)/install_manifest.txt

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp')

clean:
	rm -rf $(BUILD_DIR) build-fuzz build-asan
