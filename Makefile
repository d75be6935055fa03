# tokenflow: two commands on a fresh Debian 12 machine.
#   make demo   installs what is missing, builds, and runs the main job (tokenflow demo)
#   make test   installs what is missing, builds, and runs every test (C++ and Python)
# Packages come from Debian only (apt-get update first, then only what is missing).

SHELL := /bin/bash
PYTHON := /usr/bin/python3
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)

BUILD_DEPS := cmake make g++ pkg-config libeigen3-dev libtomlplusplus-dev nlohmann-json3-dev \
              libcli11-dev libfmt-dev liblemon-dev libgtest-dev libgmock-dev libbenchmark-dev \
              pybind11-dev python3-dev python3-numpy
TEST_DEPS  := $(BUILD_DEPS) python3-pytest python3-scipy python3-pot python3-matplotlib
DEMO_DEPS  := $(BUILD_DEPS) python3-matplotlib
# make bench: PyTorch and NumPy+OpenBLAS are the peers (bench/compare.py loads OpenBLAS for NumPy
# even when it is not the selected libblas.so.3); SLEEF is only compared in bench/bench_exp.cpp.
BENCH_DEPS := $(TEST_DEPS) python3-torch libopenblas0-pthread libsleef-dev

CMAKE_FLAGS := -DCMAKE_BUILD_TYPE=Release $(if $(CI),-DTOKENFLOW_WERROR=ON) $(CMAKE_EXTRA)

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

.PHONY: all deps build test test-cpp test-python demo bench conformance install clean format

all: build

deps:
	$(call ensure,$(BUILD_DEPS))

build: deps
	cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD_DIR) -j$(JOBS)

test:
	$(call ensure,$(TEST_DEPS))
	@$(MAKE) --no-print-directory build
	@$(MAKE) --no-print-directory test-cpp test-python

test-cpp:
	cd $(BUILD_DIR) && OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ctest --output-on-failure -j1

test-python:
	PYTHONPATH=$(BUILD_DIR)/python TOKENFLOW_CLI=$(BUILD_DIR)/tokenflow $(PYTHON) -m pytest -q tests/python

demo:
	$(call ensure,$(DEMO_DEPS))
	@$(MAKE) --no-print-directory build
	$(BUILD_DIR)/tokenflow simulate --config experiments/demo.toml --out out/demo
	@echo "tokenflow: demo written to out/demo (summary.json, diagnostics.csv, trajectory.npy)"

bench:
	$(call ensure,$(BENCH_DEPS))
	@$(MAKE) --no-print-directory build
	$(PYTHON) bench/compare.py

conformance: build
	../shared/conformance/check

install: build
	cmake --install $(BUILD_DIR) $(if $(PREFIX),--prefix $(PREFIX))

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp')

clean:
	rm -rf $(BUILD_DIR)
