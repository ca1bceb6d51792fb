# The README's two commands: `make demo` and `make test`. Each sets up, builds, then runs.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# ccache (scripts/setup installs it) as the compiler launcher, looked up when the build is configured (after
# setup, not when make reads this file: on a fresh machine ccache is not there yet). CCACHE_BASEDIR=this directory
# makes the cached paths relative to it, so a rebuild after `make clean`, or a second build directory at the same
# depth, hits the cache.
LAUNCH_LIST = env;CCACHE_BASEDIR=$(CURDIR);ccache
LAUNCHER = $(if $(shell command -v ccache),"-DCMAKE_C_COMPILER_LAUNCHER=$(LAUNCH_LIST)" \
  "-DCMAKE_CXX_COMPILER_LAUNCHER=$(LAUNCH_LIST)" "-DCMAKE_CUDA_COMPILER_LAUNCHER=$(LAUNCH_LIST)")

.PHONY: setup build python test test-extended demo bench clean

setup:
	@scripts/setup

$(BUILD)/build.ninja: | setup
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(LAUNCHER) $(CMAKE_FLAGS)

build: setup $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# the Python package twinkle (build/python; also part of `make build`)
python: setup $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target twinkle_python twinkle_run tp_recipe

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600 -LE extended

# the extended tests (label extended, tests/CMakeLists.txt): further recipes and layouts of default tests
test-extended: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600 -L extended

# make demo                 the C++ recipe (examples/tp_recipe.cpp)
# make demo RECIPE=python   the same recipe as a Python script (examples/python/tp.py)
# make demo RECIPE=moe      the Qwen3-MoE recipe, dp2 tp2 pp2 ep2 (examples/moe_recipe.cpp)
# make demo RECIPE=moe_cp   the Qwen3-MoE recipe with context parallelism, tp2 pp2 cp2 ep2 (examples/moe_cp_recipe.cpp)
# make demo ARGS="--max-steps 4"   options for the recipe (the Python scripts take the C++ recipes' names)
demo: build
	@RECIPE=$(RECIPE) DEVICE=$(DEVICE) scripts/demo $(ARGS)

bench: build
	@scripts/bench

clean:
	rm -rf $(BUILD)
