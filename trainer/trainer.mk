# The trainer: kubetrain-trainer and its tests.
DEPS_APT += build-essential pkg-config libcjson-dev libyaml-dev zlib1g-dev libopenblas-dev \
            libssl-dev libcmocka-dev libzip-dev libspng-dev libturbojpeg0-dev libhdf5-dev \
            libaec-dev libcurl4-openssl-dev dataset-fashion-mnist python3-venv

# GEMM backend (trainer/src/gemm.c), chosen at build time: make GEMM=openblas|blis|dnnl.
# OpenBLAS is the default: on this step's shapes the others were not faster
# (bench/results/gemm-backends.json, make bench-gemm). OpenBLAS stays linked whatever
# the backend (the optimizer's saxpy and the thread setting use it).
GEMM ?= openblas
GEMM_BACKENDS      := openblas blis dnnl
GEMM_APT_blis      := libblis-dev
GEMM_APT_dnnl      := libdnnl-dev
GEMM_CFLAGS_blis   := -DGEMM_BLIS -isystem /usr/include/x86_64-linux-gnu/blis-openmp
GEMM_CFLAGS_dnnl   := -DGEMM_DNNL -fopenmp
GEMM_LIBS_openblas := -lopenblas -lpthread
GEMM_LIBS_blis     := -lblis -lpthread
GEMM_LIBS_dnnl     := -ldnnl -fopenmp -lpthread
ifeq ($(filter $(GEMM),$(GEMM_BACKENDS)),)
$(error GEMM=$(GEMM): expected one of $(GEMM_BACKENDS))
endif
DEPS_APT += $(GEMM_APT_$(GEMM))
# Rewritten only when GEMM changes, so that gemm.o and the binaries follow the choice.
GEMM_STAMP := $(BUILD)/gemm-backend
$(GEMM_STAMP): FORCE
	@mkdir -p $(@D)
	@echo '$(GEMM)' | cmp -s - $@ || echo '$(GEMM)' > $@
FORCE:
.PHONY: FORCE

TRAINER_BIN   := $(BUILD)/bin/kubetrain-trainer
TRAINER_SAN   := $(BUILD)/san/bin/kubetrain-trainer
# libhdf5 (keras_export.c), Debian's serial build, linked from its archive with its szip
# filter's (libaec): the shared library pulls libcurl and some 35 libraries (15.7 MB in
# the image) for a driver the trainer never opens; the archive adds 3.1 MB to the binary
# and no library.
HDF5_INC      := -isystem /usr/include/hdf5/serial
HDF5_LIBS     := -l:libhdf5_serial.a -l:libsz.a -l:libaec.a
# libcurl (remote.c: s3:// and https:// sources), Debian's shared build: with its
# dependencies 28 more libraries, 11.8 MB in the image; no static archive of all of them.
TRAINER_LIBS  := $(GEMM_LIBS_$(GEMM)) -lopenblas -lcjson -lyaml -lzip -lspng -lturbojpeg -lcurl \
                 $(HDF5_LIBS) -lz -lcrypto -lpthread -lm
TRAINER_INC   := -Itrainer/src $(HDF5_INC)
ifneq ($(DEPS_PREFIX),)
TRAINER_INC   += -isystem $(DEPS_PREFIX)/include -isystem $(DEPS_PREFIX)/include/hdf5/serial
# An RPATH, not a RUNPATH: OpenBLAS finds its Fortran runtime there too.
TRAINER_LIBS  := -L$(DEPS_PREFIX)/lib -Wl,--disable-new-dtags,-rpath,$(abspath $(DEPS_PREFIX))/lib \
                 $(TRAINER_LIBS)
endif
# No errno from sqrtf & co (the trainer never reads it), so the optimizer loops vectorize.
TRAINER_CFLAGS := -fno-math-errno

TRAINER_SRCS  := $(filter-out trainer/src/main.c,$(wildcard trainer/src/*.c))
TRAINER_OBJS  := $(TRAINER_SRCS:%.c=$(BUILD)/opt/%.o)
TRAINER_SOBJS := $(TRAINER_SRCS:%.c=$(BUILD)/san/%.o)
TRAINER_TESTS := $(patsubst trainer/tests/%.c,$(BUILD)/san/tests/%,\
                 $(wildcard trainer/tests/test-*.c))

all: $(TRAINER_BIN) $(TRAINER_SAN)
$(BUILD)/opt/trainer/src/gemm.o $(BUILD)/san/trainer/src/gemm.o: $(GEMM_STAMP)
$(BUILD)/opt/trainer/src/gemm.o $(BUILD)/san/trainer/src/gemm.o: \
    TRAINER_CFLAGS += $(GEMM_CFLAGS_$(GEMM))
# make test-gpu's programs: the GPU build with NVIDIA's toolchain (make GPU=1 from the
# wheels of trainer/gpu-toolchain.sh, and the device checks where there is a device), the
# device bundle's rehearsal in a bare chroot, and the GPU benchmark's bookkeeping. They
# build and package rather than test the trainer's code: its GPU path runs in make test
# on the CPU emulation of CUDA (test-gpu-emul, test-gpu-emul-trainer.sh). .ci/run runs
# them after make test.
GPU_TOOLCHAIN_TESTS := trainer/tests/test-gpu-build.sh trainer/tests/test-gpu-device.sh \
                       trainer/tests/test-bench-gpu.sh
TEST_PROGRAMS += $(TRAINER_TESTS) \
                 $(filter-out $(GPU_TOOLCHAIN_TESTS),$(sort $(wildcard trainer/tests/test-*.sh)))

$(BUILD)/opt/trainer/%.o: trainer/%.c | deps
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(WARN) $(OPTFLAGS) $(TRAINER_CFLAGS) $(DEPFLAGS) $(TRAINER_INC) -c $< -o $@
$(BUILD)/san/trainer/%.o: trainer/%.c | deps
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(WARN) $(SANFLAGS) $(TRAINER_CFLAGS) $(DEPFLAGS) $(TRAINER_INC) -c $< -o $@

$(TRAINER_BIN): $(BUILD)/opt/trainer/src/main.o $(TRAINER_OBJS)
	@mkdir -p $(@D)
	$(CC) $(OPTFLAGS) -o $@ $^ $(TRAINER_LIBS)
$(TRAINER_SAN): $(BUILD)/san/trainer/src/main.o $(TRAINER_SOBJS)
	@mkdir -p $(@D)
	$(CC) $(SANFLAGS) -o $@ $^ $(TRAINER_LIBS)

# Unit tests link every trainer module (not main) and cmocka, built with the sanitizers.
$(BUILD)/san/tests/test-%: $(BUILD)/san/trainer/tests/test-%.o $(TRAINER_SOBJS)
	@mkdir -p $(@D)
	$(CC) $(SANFLAGS) -o $@ $^ -lcmocka $(TRAINER_LIBS)

# C++ tests (trainer/tests/test-*.cc): test-gpu-kernels runs the CUDA kernels of
# trainer/src/gpu/kernels.cuh, which is CUDA C++, under a CPU emulation of the grid.
CXXWARN := -Wall -Wextra $(WERROR) -Wshadow -Wformat=2 -Wvla -Wpointer-arith -Wcast-qual -Wundef
TRAINER_CXX_TESTS := $(patsubst trainer/tests/%.cc,$(BUILD)/san/tests/%,\
                     $(wildcard trainer/tests/test-*.cc))
TEST_PROGRAMS += $(TRAINER_CXX_TESTS)
$(TRAINER_CXX_TESTS): $(BUILD)/san/tests/%: trainer/tests/%.cc $(TRAINER_SOBJS) | deps
	@mkdir -p $(@D)
	$(CXX) -std=c++17 $(CXXWARN) $(SANFLAGS) -MMD -MP -MF $@.d $(TRAINER_INC) -o $@ $< \
	    $(TRAINER_SOBJS) -lcmocka $(TRAINER_LIBS)
-include $(TRAINER_CXX_TESTS:%=%.d)

# test-gpu-emul: test-gpu.c against the GPU path (device.cu, coll_nccl.c) built for the
# CPU emulation of CUDA, cuBLAS, cuDNN and NCCL in trainer/tests/fakecuda, so the GPU
# path's host code and kernels run on every make test, on machines without a GPU (what
# that does and does not check: trainer/tests/fakecuda/cuda_runtime.h and nccl.h). Few
# threads per block: each emulated thread is a real one.
EMUL_DIR   := $(BUILD)/san/emul
EMUL_FLAGS := -DKT_GPU -DKT_CUDA_EMUL -DKT_GPU_THREADS=16 -Itrainer/tests/fakecuda -Itrainer/tests
TEST_GPU_EMUL := $(BUILD)/san/tests/test-gpu-emul
TEST_PROGRAMS += $(TEST_GPU_EMUL)
$(EMUL_DIR)/device.o: trainer/src/gpu/device.cu | deps
	@mkdir -p $(@D)
	$(CXX) -x c++ -std=c++17 $(CXXWARN) $(SANFLAGS) $(EMUL_FLAGS) $(TRAINER_INC) -MMD -MP \
	    -c $< -o $@
$(EMUL_DIR)/fakecuda.o: trainer/tests/fakecuda/fakecuda.cc | deps
	@mkdir -p $(@D)
	$(CXX) -std=c++17 $(CXXWARN) $(SANFLAGS) -O2 $(EMUL_FLAGS) -MMD -MP -c $< -o $@
$(EMUL_DIR)/test-gpu.o: trainer/tests/test-gpu.c | deps
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(WARN) $(SANFLAGS) $(TRAINER_CFLAGS) $(EMUL_FLAGS) $(DEPFLAGS) \
	    $(TRAINER_INC) -c $< -o $@
$(TEST_GPU_EMUL): $(EMUL_DIR)/test-gpu.o $(EMUL_DIR)/device.o $(EMUL_DIR)/fakecuda.o \
                  $(EMUL_DIR)/trainer/src/gpu/coll_nccl.o $(TRAINER_SOBJS)
	@mkdir -p $(@D)
	$(CXX) $(SANFLAGS) -o $@ $^ -lcmocka $(TRAINER_LIBS)

# The whole trainer on the same emulation (NCCL ranks are processes there), for
# trainer/tests/test-gpu-emul-trainer.sh: train.c's GPU path, graphs, checkpoints, ranks.
EMUL_TRAINER := $(EMUL_DIR)/bin/kubetrain-trainer
EMUL_COBJS   := $(patsubst %.c,$(EMUL_DIR)/%.o,\
                trainer/src/main.c $(TRAINER_SRCS) $(wildcard trainer/src/gpu/*.c))
$(EMUL_DIR)/trainer/%.o: trainer/%.c | deps
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(WARN) $(SANFLAGS) $(TRAINER_CFLAGS) $(EMUL_FLAGS) $(DEPFLAGS) \
	    $(TRAINER_INC) -c $< -o $@
$(EMUL_TRAINER): $(EMUL_COBJS) $(EMUL_DIR)/device.o $(EMUL_DIR)/fakecuda.o
	@mkdir -p $(@D)
	$(CXX) $(SANFLAGS) -o $@ $^ $(TRAINER_LIBS)
test-build: $(EMUL_TRAINER)
test-gpu: all $(EMUL_TRAINER)
	@TAPRUN_JOBS=$(TEST_JOBS) bash .ci/taprun $(GPU_TOOLCHAIN_TESTS)
.PHONY: test-gpu
-include $(EMUL_DIR)/*.d $(EMUL_COBJS:.o=.d)

# What --version prints (main.c): the VERSION file at the top, which also tags the images.
TRAINER_VERSION := $(shell cat VERSION)
TRAINER_MAINS   := $(BUILD)/opt/trainer/src/main.o $(BUILD)/san/trainer/src/main.o \
                   $(EMUL_DIR)/trainer/src/main.o
$(TRAINER_MAINS): VERSION
$(TRAINER_MAINS): TRAINER_CFLAGS += -DKT_VERSION='"$(TRAINER_VERSION)"'

trainer: $(TRAINER_BIN)
.PHONY: trainer

# Benchmarks (make bench). bench-allreduce: the ring against PyTorch gloo and the
# loopback exchange limit, AR_ROUNDS turns each; torch (CPU use) lives in a venv under
# $(KT_CACHE).
AR_ROUNDS ?= 5
BENCH_TARGETS += bench-allreduce
$(BUILD)/bin/bench-allreduce: $(BUILD)/opt/trainer/bench/bench-allreduce.o $(TRAINER_OBJS)
	@mkdir -p $(@D)
	$(CC) $(OPTFLAGS) -o $@ $^ $(TRAINER_LIBS)
bench-allreduce: $(BUILD)/bin/bench-allreduce
	@mkdir -p bench/results
	torch=$$(bash bench/pyvenv.sh venv-torch) && \
	$(BUILD)/bin/bench-allreduce --python $$torch --rounds $(AR_ROUNDS) \
	    --out bench/results/allreduce.json
.PHONY: bench-allreduce

# Benchmark: kubetrain vs TensorFlow/Keras, PyTorch (CPU, venv-torch) and the GEMM floor
# (trainer/bench/bench_trainer.py).
# TensorFlow and PyTorch come from PyPI into venvs under $(KT_CACHE), made once by
# bench/pyvenv.sh.
GEMM_FLOOR   := $(BUILD)/bench/gemm_floor
FASHION_DIR  ?= /usr/share/datasets/fashion-mnist
BENCH_TARGETS += bench-trainer

# The floor uses the trainer's gemm.c, thread pool and backend (GEMM), so it is the same
# library on the same threads.
GEMM_FLOOR_SRCS := trainer/bench/gemm_floor.c trainer/src/gemm.c trainer/src/pool.c \
                   trainer/src/cpu.c
$(GEMM_FLOOR): $(GEMM_FLOOR_SRCS) $(GEMM_STAMP) | deps
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(WARN) $(OPTFLAGS) $(TRAINER_INC) $(GEMM_CFLAGS_$(GEMM)) -o $@ \
	    $(GEMM_FLOOR_SRCS) $(GEMM_LIBS_$(GEMM))

bench-trainer: $(TRAINER_BIN) $(GEMM_FLOOR)
	tf=$$(bash bench/pyvenv.sh venv-tf) && torch=$$(bash bench/pyvenv.sh venv-torch) && \
	python3 trainer/bench/bench_trainer.py $(TRAINER_BIN) $(GEMM_FLOOR) $$tf \
	    $(FASHION_DIR) bench/results/trainer-core.json $$torch

# Regenerates trainer/tests/reference/reference.json with TensorFlow (commit the result).
reference-trainer:
	tf=$$(bash bench/pyvenv.sh venv-tf) && \
	$$tf trainer/tests/reference/gen_reference.py $(FASHION_DIR)

# Regenerates trainer/tests/reference/tfrecord/ with TensorFlow (commit the result).
reference-tfrecord:
	tf=$$(bash bench/pyvenv.sh venv-tf) && \
	$$tf trainer/tests/reference/tfrecord/gen_tfrecord.py $(FASHION_DIR)

# Regenerates trainer/tests/reference/activations/ with Keras 3 and tf-keras (commit it).
reference-activations:
	tf=$$(bash bench/pyvenv.sh venv-tf) && \
	$$tf trainer/tests/reference/activations/gen_activations.py

# Regenerates trainer/tests/reference/layers/ with Keras 3 and tf-keras (commit it).
reference-layers:
	tf=$$(bash bench/pyvenv.sh venv-tf) && \
	$$tf trainer/tests/reference/layers/gen_layers.py

.PHONY: bench-trainer reference-trainer reference-tfrecord reference-activations \
	reference-layers

# Benchmark: the data sources side by side (trainer/bench/bench_data.py): the same job
# from IDX, npz, PNG TFRecords held decoded and streamed, raw uint8 TFRecords streamed,
# GZIP TFRecords, the same TFRecords from SeaweedFS's S3 gateway (built once per machine,
# e2e/cluster/build-seaweedfs.sh; S3=0 leaves them out), TensorFlow fit on the GZIP
# TFRecords through tf.data, and two workers; samples/s against IDX's and peak RSS, then
# peak RSS streaming BIG_MIB (2048) MiB of TFRecords. The data sets are written by NumPy
# and TensorFlow (trainer/bench/make_data.py) into $(BENCH_DATA_DIR), once. ROUNDS (8;
# odd rounds in one order, even ones in the reverse), EPOCHS, STEPS, RUNS (a subset), S3,
# BIG_MIB and NOTE (the machine's load, recorded) go through the environment;
# BENCH_DATA_OUT names the JSON.
BENCH_DATA_DIR ?= $(BUILD)/bench-data
BENCH_DATA_OUT ?= bench/results/data.json
BENCH_TARGETS += bench-data
bench-data: $(TRAINER_BIN)
	tf=$$(bash bench/pyvenv.sh venv-tf) && \
	python3 trainer/bench/bench_data.py $(TRAINER_BIN) $$tf $(FASHION_DIR) $(BENCH_DATA_DIR) \
	    $(BENCH_DATA_OUT)
.PHONY: bench-data

# Benchmark: the CIFAR-shaped Conv-BatchNorm model of issue 44 on one worker against
# TensorFlow/Keras fit and PyTorch eager, interleaved, and a perf profile of the trainer's
# step (trainer/bench/bench_cifar.py). The model and its synthetic data are written once
# by Keras (trainer/bench/cifar_keras.py) into $(CIFAR_DIR). ROUNDS, EPOCHS, STEPS and
# NOTE (the machine's load, recorded) go to the script through the environment.
CIFAR_DIR ?= $(BUILD)/bench-cifar
BENCH_TARGETS += bench-cifar
$(CIFAR_DIR)/cifar.npz: trainer/bench/cifar_keras.py
	tf=$$(bash bench/pyvenv.sh venv-tf) && $$tf trainer/bench/cifar_keras.py prepare $(@D)
# cifar_layers: the model's layers one pass at a time (trainer/bench/cifar_layers.c), built
# with the trainer's flags from the trainer's own layers, products and pool.
CIFAR_LAYERS := $(BUILD)/bench/cifar_layers
CIFAR_LAYERS_SRCS := trainer/bench/cifar_layers.c trainer/src/layers.c trainer/src/gemm.c \
                     trainer/src/pool.c trainer/src/cpu.c trainer/src/util.c
$(CIFAR_LAYERS): $(CIFAR_LAYERS_SRCS) $(GEMM_STAMP) | deps
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(WARN) $(OPTFLAGS) $(TRAINER_CFLAGS) $(TRAINER_INC) -o $@ \
	    $(CIFAR_LAYERS_SRCS) $(TRAINER_LIBS)
bench-cifar: $(TRAINER_BIN) $(CIFAR_LAYERS) $(CIFAR_DIR)/cifar.npz
	tf=$$(bash bench/pyvenv.sh venv-tf) && torch=$$(bash bench/pyvenv.sh venv-torch) && \
	CIFAR_LAYERS=$(CIFAR_LAYERS) python3 trainer/bench/bench_cifar.py $(TRAINER_BIN) $$tf \
	    $$torch $(CIFAR_DIR) bench/results/cifar.json
.PHONY: bench-cifar

# Benchmark: the tutorial job on 2 local workers, kubetrain launch vs TensorFlow
# MultiWorkerMirroredStrategy (trainer/bench/bench_distributed.py); also 4 workers,
# checkpoint cost and peak RSS. DIST_ROUNDS interleaved rounds, medians reported.
DIST_ROUNDS ?= 1
BENCH_TARGETS += bench-distributed
bench-distributed: $(TRAINER_BIN)
	tf=$$(bash bench/pyvenv.sh venv-tf) && \
	python3 trainer/bench/bench_distributed.py $(TRAINER_BIN) $$tf \
	    $(FASHION_DIR) bench/results/distributed.json $(DIST_ROUNDS)
.PHONY: bench-distributed

# Benchmark: live recovery against the group restart (trainer/bench/bench_recovery.py):
# 4 workers under launch, one SIGKILLed mid-epoch, the time from the kill to the next
# completed step and the steps trained twice; RECOVERY_ROUNDS interleaved rounds.
RECOVERY_ROUNDS ?= 3
BENCH_TARGETS += bench-recovery
bench-recovery: $(TRAINER_BIN)
	python3 trainer/bench/bench_recovery.py $(TRAINER_BIN) $(FASHION_DIR) \
	    bench/results/recovery.json $(RECOVERY_ROUNDS)
.PHONY: bench-recovery

# Benchmark: the step's GEMMs with each backend, 1 and 2 threads, interleaved
# (trainer/bench/gemm_compare.py); needs every backend's package.
BENCH_TARGETS += bench-gemm
$(BUILD)/.deps-gemm-backends:
	@mkdir -p $(@D)
	@bash .ci/deps.sh $(GEMM_APT_blis) $(GEMM_APT_dnnl)
	@touch $@
$(BUILD)/bench/gemm_floor-%: $(GEMM_FLOOR_SRCS) | deps $(BUILD)/.deps-gemm-backends
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(WARN) $(OPTFLAGS) $(TRAINER_INC) $(GEMM_CFLAGS_$*) -o $@ \
	    $(GEMM_FLOOR_SRCS) $(GEMM_LIBS_$*)
bench-gemm: $(GEMM_BACKENDS:%=$(BUILD)/bench/gemm_floor-%)
	@mkdir -p bench/results
	python3 trainer/bench/gemm_compare.py bench/results/gemm-backends.json $^
.PHONY: bench-gemm

# ---- GPU build: make GPU=1 (docs/gpu.md) --------------------------------------------
# The trainer with CUDA: the device step (trainer/src/gpu/: cuDNN convolutions, cuBLAS
# dense layers, CUDA kernels for the rest) and the nccl collective. The toolchain comes
# from CUDA_HOME or /usr/local/cuda, else from NVIDIA's wheels installed once under
# $(KT_CACHE)/cuda by trainer/gpu-toolchain.sh; cuDNN and NCCL from CUDNN_HOME and
# NCCL_HOME (default: CUDA_HOME). Build it into its own directory so that the CPU
# objects are not mixed with it: make GPU=1 BUILD=build/gpu. The CPU build stays the
# default; trainer/tests/test-gpu-build.sh compiles and links this one on every make test-gpu.
ifeq ($(GPU),1)
CUDA_HOME := $(shell bash trainer/gpu-toolchain.sh)
ifeq ($(CUDA_HOME),)
$(error GPU=1: no CUDA toolchain (trainer/gpu-toolchain.sh failed, see above))
endif
CUDNN_HOME ?= $(CUDA_HOME)
NCCL_HOME  ?= $(CUDA_HOME)
cuda_libdir = $(firstword $(wildcard $(1)/lib64) $(1)/lib)
NVCC       := $(CUDA_HOME)/bin/nvcc
# Ampere and Hopper as binaries, PTX of the newest for the rest.
CUDA_ARCHS ?= 80 90
CUDA_PTX     := $(lastword $(CUDA_ARCHS))
NVCC_GENCODE := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
                -gencode arch=compute_$(CUDA_PTX),code=compute_$(CUDA_PTX)
GPU_INC    := -isystem $(CUDA_HOME)/include -isystem $(CUDNN_HOME)/include \
              -isystem $(NCCL_HOME)/include
NVCCFLAGS  := -std=c++17 -O3 -g $(NVCC_GENCODE) -ccbin $(CXX) $(GPU_INC) $(TRAINER_INC) -DKT_GPU \
              -Xcompiler -Wall,-Wextra,-Wshadow,-fno-math-errno $(if $(WERROR),-Xcompiler -Werror)
GPU_LIBDIRS := $(sort $(call cuda_libdir,$(CUDA_HOME)) $(call cuda_libdir,$(CUDNN_HOME)) \
                      $(call cuda_libdir,$(NCCL_HOME)))
TRAINER_CFLAGS += -DKT_GPU $(GPU_INC)
TRAINER_LIBS   += $(GPU_LIBDIRS:%=-L%) $(GPU_LIBDIRS:%=-Wl,-rpath,%) \
                  -lcudnn -lcublas -lnccl -lcudart -lstdc++
GPU_CSRCS  := $(wildcard trainer/src/gpu/*.c)
GPU_CUSRCS := $(wildcard trainer/src/gpu/*.cu)
GPU_CUOBJS := $(GPU_CUSRCS:%.cu=$(BUILD)/opt/%.cu.o)
GPU_OBJS   := $(GPU_CSRCS:%.c=$(BUILD)/opt/%.o) $(GPU_CUOBJS)
# The sanitizer builds take the device code as it is (nvcc objects carry no ASan).
GPU_SOBJS  := $(GPU_CSRCS:%.c=$(BUILD)/san/%.o) $(GPU_CUOBJS)
$(BUILD)/opt/trainer/%.cu.o: trainer/%.cu | deps
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@
# Extra prerequisites: the link rules above take them through $^.
$(TRAINER_BIN): $(GPU_OBJS)
$(TRAINER_SAN) $(TRAINER_TESTS): $(GPU_SOBJS)
$(BUILD)/bin/bench-allreduce: $(GPU_OBJS)
endif

# Benchmark of the GPU build, on a machine with a CUDA device: tutorial-cnn on one GPU against
# PyTorch eager and torch.compile (trainer/bench/bench_gpu.py), and the nccl collective's
# cost at one rank. Not in `make bench`: without a device it only says skipped.
# GPU_BENCH_PYTHON: a Python with a CUDA build of torch (default: one installed into
# $(KT_CACHE)/venv-torch on first use); GPU_BENCH_OUT: the JSON, written after every run.
GPU_BENCH_TORCH  := $(KT_CACHE)/venv-torch
GPU_BENCH_PYTHON ?= $(GPU_BENCH_TORCH)/bin/python
GPU_BENCH_OUT    ?= bench/results/gpu-tutorial-cnn.json
bench-gpu:
	$(MAKE) GPU=1 BUILD=$(BUILD)/gpu $(BUILD)/gpu/bin/kubetrain-trainer
	@test -x $(GPU_BENCH_PYTHON) || bash bench/pyvenv.sh venv-torch >/dev/null
	python3 trainer/bench/bench_gpu.py $(BUILD)/gpu/bin/kubetrain-trainer \
	    $(GPU_BENCH_PYTHON) $(FASHION_DIR) $(GPU_BENCH_OUT)
.PHONY: bench-gpu
