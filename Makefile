# kmeans_gpu: PGXS build.
#
#   make && make install     the extension (needs postgresql-server-dev)
#   make test                everything a fresh Debian 12 machine needs, then every suite
#   make demo                Fashion-MNIST clustered in a throwaway server
#   make bench               CPU engine against scikit-learn (test/bench)
#   make bench-assign        kmeans_assign row by row against kmeans_labels

# kmeans_gpu_sharded: kmeans_fit_sharded over PL/Proxy (requires plproxy),
# its own extension so that kmeans_gpu never needs PL/Proxy; same library.
EXTENSION = kmeans_gpu kmeans_gpu_sharded
MODULE_big = kmeans_gpu
DATA = $(wildcard sql/kmeans_gpu--*.sql) $(wildcard sql/kmeans_gpu_sharded--*.sql)

SQL_SRCS = $(sort $(wildcard src/*.c))
ENGINE_SRCS = $(sort $(wildcard src/engine/*.c))
OBJS = $(SQL_SRCS:.c=.o) $(ENGINE_SRCS:.c=.o)

# pg_regress: sql/NAME.sql against expected/NAME.out, every test in sql/
# except the install scripts.
REGRESS = $(filter-out kmeans_gpu--% kmeans_gpu_sharded--%,$(basename $(notdir $(wildcard sql/*.sql))))
REGRESS_OPTS = --load-extension=kmeans_gpu

# -ffp-contract=off: km_exact.h must round every step the way the GPU does.
# The CPU engine has its own fused distance kernel (src/engine/cpu_filter.c)
# and needs no BLAS.
PG_CPPFLAGS = -Isrc/include -Ikernels/include
PG_CFLAGS = -ffp-contract=off -pthread
SHLIB_LINK = -lpthread -lm

EXTRA_CLEAN = test/bench/kmeans_bench test/engine/engine_test test/engine/kmedoids_test

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifneq ($(wildcard $(PGXS)),)
include $(PGXS)
else
# No server development files yet: only the targets that install them work.
all install:
	@echo "PostgreSQL server development files not found: run 'make test' or 'make demo'," \
	      "which install them (Debian 12), or set PG_CONFIG." >&2; exit 1
endif

# The CUDA engine: its own shared object, loaded at run time by kmeans_gpu.so,
# built whenever nvcc is found (CUDA runtime linked statically).
NVCC ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
CUDA_ARCHS ?= 80 90
# 90 is built as sm_90a, Hopper's own code, for the screen's wgmma
# (kernels/assign/screen.cu); such code runs on compute capability 9.0 only,
# as sm_90 code did
CUDA_ARCH_CODE = $(if $(filter 90,$(1)),90a,$(1))
CUDA_GENCODE = $(foreach a,$(CUDA_ARCHS),-gencode=arch=compute_$(call CUDA_ARCH_CODE,$(a)),code=sm_$(call CUDA_ARCH_CODE,$(a)))
# kernels/: the API and drivers, then the kernel families, one folder each
# (kernels/bench holds harnesses, not engine code).
CUDA_DIRS = driver prep assign update seed medoids
CUDA_SRCS = $(sort $(foreach d,$(CUDA_DIRS),$(wildcard kernels/$(d)/*.cu)))
NVCCFLAGS = -O3 -std=c++17 -Xcompiler -fPIC,-fvisibility=hidden,-ffp-contract=off \
	-Isrc/include -Ikernels -Ikernels/include --cudart static $(CUDA_GENCODE)
ifneq ($(NVCC),)
ifneq ($(CUDA_SRCS),)
CUDA_SO = kmeans_gpu_cuda.so
# ptxas's report on every kernel of the library (registers, stack frame,
# spills), kept beside it for test/scripts/check_kernel_frames.py; nvcc's
# other messages still go to stderr
CUDA_PTXAS = $(CUDA_SO).ptxas
all: $(CUDA_SO)
$(CUDA_SO) $(CUDA_PTXAS) &: $(CUDA_SRCS) $(wildcard kernels/*/*.h kernels/*/*.cuh src/include/*.h)
	$(NVCC) $(NVCCFLAGS) -Xptxas -v -shared -o $(CUDA_SO) $(CUDA_SRCS) 2> $(CUDA_PTXAS); \
	rc=$$?; grep -v -E '^ptxas info|^ +[0-9]+ bytes stack frame' $(CUDA_PTXAS) >&2; \
	if [ $$rc -ne 0 ]; then rm -f $(CUDA_PTXAS); fi; exit $$rc
install: install-cuda
install-cuda: $(CUDA_SO)
	$(INSTALL_SHLIB) $(CUDA_SO) '$(DESTDIR)$(pkglibdir)/'
uninstall: uninstall-cuda
uninstall-cuda:
	rm -f '$(DESTDIR)$(pkglibdir)/$(CUDA_SO)'
EXTRA_CLEAN += $(CUDA_SO) $(CUDA_PTXAS) test/gpu/sgemm_time

# The database benchmark's reference: a strict-fp32 cuBLAS SGEMM timer.
test/gpu/sgemm_time: test/gpu/sgemm_time.cu
	$(NVCC) -O2 -std=c++17 $(CUDA_GENCODE) -o $@ $< -lcublas
endif
endif

# The per-row copy of every scan is a loop the compiler should vectorise.
src/vector_input.o: CFLAGS += $(CFLAGS_VECTORIZE)

# Every object depends on every header (PGXS tracks no header dependencies).
$(OBJS): $(wildcard src/*.h src/engine/*.h src/include/*.h kernels/include/kmeans_gpu_cuda.h)

# Standalone programs on the engine alone (no PostgreSQL).
STANDALONE_CFLAGS = -O2 -g -Wall -ffp-contract=off -pthread -Isrc/include -Isrc/engine

test/bench/kmeans_bench: test/bench/kmeans_bench.c $(ENGINE_SRCS) $(wildcard src/engine/*.h src/include/*.h)
	$(CC) $(STANDALONE_CFLAGS) -o $@ test/bench/kmeans_bench.c $(ENGINE_SRCS) -lpthread -lm

test/engine/engine_test: test/engine/engine_test.c $(ENGINE_SRCS) $(wildcard src/engine/*.h src/include/*.h)
	$(CC) $(STANDALONE_CFLAGS) -o $@ test/engine/engine_test.c $(ENGINE_SRCS) -lpthread -lm

test/engine/kmedoids_test: test/engine/kmedoids_test.c $(ENGINE_SRCS) $(wildcard src/engine/*.h)
	$(CC) $(STANDALONE_CFLAGS) -o $@ test/engine/kmedoids_test.c $(ENGINE_SRCS) -lpthread -lm

.PHONY: test demo bench bench-assign install-cuda uninstall-cuda
test:
	@test/scripts/run_tests.sh

demo:
	@test/scripts/with_server.sh 55433 /usr/bin/python3 test/demo/fashion_mnist.py "$(CURDIR)/fashion_mnist_centroids.png"

bench: test/bench/kmeans_bench
	@test/bench/run_cpu_bench.sh

bench-assign:
	@test/scripts/with_server.sh $${KM_TEST_PORT:-55434} /usr/bin/python3 test/bench/assign_bench.py
