# The quick start: `make demo` (set up and run the default meta-training demo) and
# `make test` (set up, lint with ruff, and run the test suite). Both create .venv on first use.
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast gpu-preflight setup bench gpu-wheels docs clean
setup: $(STAMP)
$(STAMP): pyproject.toml requirements.lock scripts/setup-venv scripts/find-python
	scripts/setup-venv

demo: $(STAMP)
	$(VENV)/bin/metadisco train $(ARGS)
	@echo "metadisco: the command is $(VENV)/bin/metadisco (after 'source $(VENV)/bin/activate': metadisco)"

# The suite runs in one pytest-xdist worker per core (its time: docs/developing.md); PYTEST_WORKERS=0 runs it
# in this process. --dist loadfile keeps a file's tests on one worker, so a module-scoped fixture (a
# trained run, a compiled program) is built once, not once per worker.
PYTEST_WORKERS ?= auto
PYTEST_DIST := $(if $(filter 0,$(PYTEST_WORKERS)),,--dist loadfile --no-loadscope-reorder)
# The suite compiles with XLA's optimisations off (tests/conftest.py); the tests marked `optimised`
# (resume bit for bit, the device count, PPO solves CartPole) compile in the optimised build that users
# run, in the same pass (conftest's optimised_build): their promise is about that build.
# Exit status 5 is pytest's "no tests collected": PYTEST_ARGS chose no test.
# The documentation site builds beside the tests, its output shown when it fails.
test: $(STAMP)
	$(VENV)/bin/ruff check .
	@$(MKDOCS) build --strict --site-dir site > $(VENV)/mkdocs.log 2>&1 & docs=$$!; \
	$(VENV)/bin/python -m pytest -n $(PYTEST_WORKERS) $(PYTEST_DIST) $(PYTEST_ARGS); \
	status=$$?; [ $$status -eq 5 ] && status=0; \
	if wait $$docs; then echo "metadisco: documentation site built (mkdocs build --strict)"; \
	else cat $(VENV)/mkdocs.log; echo "metadisco: mkdocs build --strict failed"; status=1; fi; exit $$status

# The documentation site (mkdocs.yml) into site/ (ignored by git); `make test` builds it too, --strict,
# so that a broken link or API reference fails the suite.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs
docs: $(STAMP)
	$(MKDOCS) build --strict --site-dir site
	@echo "metadisco: the documentation site is in site/ (open site/index.html, or: $(VENV)/bin/mkdocs serve)"

# The edit loop: the suite without its end-to-end tests marked slow (`@pytest.mark.slow` on each).
test-fast: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/python -m pytest -n $(PYTEST_WORKERS) $(PYTEST_DIST) -m "not slow" $(PYTEST_ARGS)

# Before a GPU sitting: the GPU queue's whole smoke on the CPU (every entry trained at a tiny size to its
# verdict and held-out evaluation, then one again from the first call's compile cache; about 17 min on
# 2 cores). `make test` plans every entry and runs one through the queue twice (tests/test_gpu_queue.py).
gpu-preflight: $(STAMP)
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/preflight_gpu_queue.py $(PYTEST_ARGS)

# The like-for-like inner-loop benchmark (metadisco vs the PureJaxRL-style reference); long:
# see docs/benchmarks.md. ARGS=--quick for a smoke check (then it writes nothing to docs/).
bench: $(STAMP)
	$(VENV)/bin/python benchmarks/inner_loop.py $(if $(filter --quick,$(ARGS)),,--out docs/benchmark_results/inner_loop.json --markdown docs/benchmark_results/inner_loop.md) $(ARGS)

# The locked wheels that benchmarks/gpu_benchmark.sh installs on a CUDA host without package access
# (x86-64, Python 3.12).
GPU_WHEELS := flax optax chex evosax gymnax brax mujoco mujoco-core mujoco-mjx jaxopt gymnasium \
	farama-notifications dotmap trimesh glfw ml-collections
gpu-wheels: $(STAMP)
	for p in $(GPU_WHEELS); do $(VENV)/bin/python -m pip download -q --no-deps --only-binary=:all: -d .whl \
	  --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform any \
	  "$$p==$$(grep -i "^$$p==" requirements.lock | cut -d= -f3)" || exit 1; done

clean:
	rm -rf $(VENV)
