# A thin wrapper over CMake: `make demo` and `make test` are the quick start.
# Both install missing Debian packages first (scripts/install-deps.sh).
#
#   make demo                 build, generate demo data, run the end-to-end slice
#   make test                 build + all tests, then the ASan+UBSan build + CPU tests
#   make build ARCH=90        kernels for sm_90 (H100/H200); default sm_120
#   make build CUDA_ROOT=DIR  the CUDA toolkit in DIR (default /usr/local/cuda)
#   make device-build         the build folder to carry to the H200 machine (sm_90)
#   make fresh-check          make test + make demo in a clean Debian 12 chroot,
#                             without and with the CUDA toolkit (root, minutes)
#   make fuzz FUZZ_SECONDS=N  every libFuzzer target for N s (default 60) in a clang
#                             build folder; FUZZ_TARGETS="proto agent shard elf"
#   make soak                 the reliability tests' long versions: 1000 stagingd kills,
#                             a soak of minutes (docs/reliability.md)
#   make clean
#
# Each long step prints one line (progress, then ok and its time) and keeps
# its whole output in <build dir>/logs/; a failing step shows the end of its
# log and the log's path. V=1 shows everything as well.

ARCH       ?= 120
BUILD_DIR  ?= build
ASAN_DIR   ?= build-asan
DEVICE_DIR ?= build-device
JOBS       ?= $(shell nproc)
CUDA_ROOT  ?= /usr/local/cuda
CMAKE_ARGS ?=
FRESH_ARGS ?=

# The build's own make runs below cmake --build; its Entering/Leaving lines
# are noise even in a log.
MAKEFLAGS += --no-print-directory
export V

# Check's hang guard for test cases that set no timeout of their own is 4 s,
# which a loaded 2-core machine exceeds under ASan; the ctest TIMEOUTs stay.
CK_DEFAULT_TIMEOUT ?= 30
export CK_DEFAULT_TIMEOUT

STEP = scripts/step.sh

.PHONY: all deps build test test-main test-asan demo device-build fresh-check fuzz soak clean

all: build

deps:
	@DEPS_LOG_DIR=$(BUILD_DIR)/logs LEASE_CUDA_ROOT=$(CUDA_ROOT) scripts/install-deps.sh

# configure_and_build(<dir>, <summary kind of configure>, <cmake args>)
define configure_and_build
	@$(STEP) "configure $(1)/" $(1)/logs/configure.log --summary $(2) -- \
	    cmake -S . -B $(1) -DLEASE_CUDA_ROOT=$(CUDA_ROOT) $(3) $(CMAKE_ARGS)
	@$(STEP) "build $(1)/" $(1)/logs/build.log -- cmake --build $(1) -j $(JOBS)
endef

build: deps
	$(call configure_and_build,$(BUILD_DIR),configure,-DLEASE_GPU_ARCH=$(ARCH))

test: test-main test-asan
	@echo "make test: the main build's tests and the sanitizer build's CPU tests passed"

test-main: build
	@$(STEP) "test $(BUILD_DIR)/ (ctest)" $(BUILD_DIR)/logs/ctest.log --summary ctest -- \
	    ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

# GPU tests are left out here: the sanitizer build runs the CPU suite. Its
# configure summary would repeat the main build's.
test-asan: deps
	$(call configure_and_build,$(ASAN_DIR),none,-DLEASE_GPU_ARCH=$(ARCH) -DLEASE_SANITIZE=ON)
	@$(STEP) "test $(ASAN_DIR)/ (ctest, CPU tests under ASan+UBSan)" $(ASAN_DIR)/logs/ctest.log \
	    --summary ctest -- ctest --test-dir $(ASAN_DIR) --output-on-failure -j $(JOBS) -LE '^gpu$$'

demo: build
	@scripts/demo.sh $(BUILD_DIR)

# Without /metrics: libmicrohttpd's shared gnutls may be missing, or older,
# on the GPU machine, and stagingd would then not start there at all.
device-build: deps
	$(call configure_and_build,$(DEVICE_DIR),configure,-DLEASE_GPU_ARCH=90 -DLEASE_WITH_METRICS=OFF)

fresh-check:
	@scripts/fresh-debian.sh $(FRESH_ARGS)

FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
FUZZ_DIR     ?= build-fuzz
fuzz:
	@FUZZ_BUILD=$(FUZZ_DIR) scripts/fuzz.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The same tests as make test runs, at their opt-in sizes.
soak: build
	@LEASE_RELIABILITY_LONG=1 $(STEP) "soak $(BUILD_DIR)/ (reliability, long)" \
	    $(BUILD_DIR)/logs/soak.log --summary ctest -- \
	    ctest --test-dir $(BUILD_DIR) --output-on-failure -L reliability --timeout 7200

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(DEVICE_DIR) $(FUZZ_DIR)
