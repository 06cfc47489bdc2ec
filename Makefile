# jaxrec's entry point for development. `make help` lists the targets.
PYTHON ?= python
.DEFAULT_GOAL := help

.PHONY: help install test test-rust test-py lint format bench golden demo fuzz fuzz-build mutants mutants-rust mutants-py

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

install: ## Build the native module (release) and install jaxrec editable with the dev tools
	$(PYTHON) -m pip install -e ".[dev]"

test: test-rust test-py ## Run every test: Rust unit tests, then the Python suite

test-rust: ## Rust unit tests (plain crate, no Python)
	cargo test --quiet

test-py: ## Python tests (unit, golden, property, failure)
	$(PYTHON) -m pytest -q

lint: ## ruff, the stub check, rustfmt and clippy
	$(PYTHON) -m ruff check python tests benchmarks examples scripts
	$(PYTHON) -m ruff format --check python tests benchmarks examples scripts
	$(PYTHON) -m mypy.stubtest jaxrec._native
	cargo fmt --check
	cargo clippy --all-targets --features python -- -D warnings

format: ## Format Python and Rust sources
	$(PYTHON) -m ruff format python tests benchmarks examples scripts
	$(PYTHON) -m ruff check --fix python tests benchmarks examples scripts
	cargo fmt

bench: ## Side-by-side throughput against tf.data (needs: pip install -e ".[tf]")
	$(PYTHON) benchmarks/bench_parse.py --workload tokens --threads 2
	$(PYTHON) benchmarks/bench_parse.py --workload tabular --threads 2
	$(PYTHON) benchmarks/bench_parse.py --workload sequence --threads 2
	$(PYTHON) benchmarks/bench_framing.py
	$(PYTHON) benchmarks/bench_images.py --threads 2
	$(PYTHON) benchmarks/bench_device_feed.py --threads 2

# `make fuzz FUZZ_ARGS="--executions 2000000"`; findings (input, .json, one-line .txt reproducer) go
# to fuzz-findings/. See tests/fuzz/__init__.py.
FUZZ_ARGS ?= --seconds 600
fuzz-build: ## Build the extension with overflow checks and debug assertions, for make fuzz
	maturin develop --profile fuzz

fuzz: ## Mutation-fuzz the reader, parsers, decoders, CLI and Loader in a watched child (FUZZ_ARGS)
	PYTHONPATH=tests $(PYTHON) -m fuzz $(FUZZ_ARGS)

golden: ## Rewrite tests/data/golden{,_images,_proto,_composite} with real TensorFlow (needs: pip install -e ".[tf]")
	$(PYTHON) scripts/make_golden.py

demo: ## Run the demo on the embedded dataset
	$(PYTHON) -m jaxrec.demo

LOADER_TESTS = tests/unit/test_interleave.py tests/unit/test_shares.py tests/unit/test_sharding.py \
	tests/unit/test_loader.py tests/unit/test_loader_pods.py tests/unit/test_loader_integrity.py \
	tests/unit/test_chunks.py tests/unit/test_manifest.py tests/unit/test_device.py \
	tests/unit/test_transforms.py tests/unit/test_distributed.py tests/unit/test_packing.py \
	tests/unit/test_bucketing.py tests/unit/test_mixing.py tests/unit/test_collective.py \
	tests/unit/test_batcher.py

mutants: mutants-rust mutants-py ## Mutation testing: do the tests notice deliberate bugs? (slow)

mutants-rust: ## cargo-mutants on the framing and the parser, against the Rust tests alone
	cargo mutants --no-shuffle -j 2 -f 'src/records/*.rs' -f 'src/parse/*.rs' -f src/wire.rs

mutants-py: ## Mutants of the Loader's stages against its tests (scripts/mutants_py.py)
	$(PYTHON) scripts/mutants_py.py python/jaxrec/_loader/*.py --tests $(LOADER_TESTS) --jobs 2 \
		--equivalent scripts/mutants-equivalent.txt
