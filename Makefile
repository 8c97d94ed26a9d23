# A thin wrapper over CMake: `make demo` and `make test` are the quick start.
# Both install missing Debian packages first (scripts/install-deps.sh).
#
#   make demo                 build, generate demo data, run the end-to-end slice
#   make test                 build + all tests, then the ASan+UBSan build + CPU tests
#   make build ARCH=90        kernels for sm_90 (H100/H200); default sm_120
#   make device-build         the build folder to carry to the H200 machine (sm_90)
#   make clean

ARCH       ?= 120
BUILD_DIR  ?= build
ASAN_DIR   ?= build-asan
DEVICE_DIR ?= build-device
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all deps build test test-main test-asan demo device-build clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD_DIR) -DLEASE_GPU_ARCH=$(ARCH) $(CMAKE_ARGS)
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: test-main test-asan
	@echo "make test: the main build's tests and the sanitizer build's CPU tests passed"

test-main: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

# GPU tests are left out here: the sanitizer build runs the CPU suite.
test-asan: deps
	cmake -S . -B $(ASAN_DIR) -DLEASE_GPU_ARCH=$(ARCH) -DLEASE_SANITIZE=ON $(CMAKE_ARGS)
	cmake --build $(ASAN_DIR) -j $(JOBS)
	ctest --test-dir $(ASAN_DIR) --output-on-failure -j $(JOBS) -LE '^gpu$$'

demo: build
	scripts/demo.sh $(BUILD_DIR)

device-build: deps
	cmake -S . -B $(DEVICE_DIR) -DLEASE_GPU_ARCH=90 $(CMAKE_ARGS)
	cmake --build $(DEVICE_DIR) -j $(JOBS)

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(DEVICE_DIR)
