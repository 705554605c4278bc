# The quickstart: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
TF_VENV := .venv-tf
BIN := $(VENV)/bin

.PHONY: demo test test-fast bench clean vendor

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "mlyard needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[examples,test,cleaning]'
	touch $@

# TensorFlow lives in an environment of its own: the TF example's job points PATH at it.
$(TF_VENV)/.installed: examples/requirements-tf.txt examples/requirements-tf-nodeps.txt
	$(PYTHON) -m venv $(TF_VENV)
	$(TF_VENV)/bin/pip install --quiet --upgrade pip
	$(TF_VENV)/bin/pip install --quiet -r examples/requirements-tf.txt
	$(TF_VENV)/bin/pip install --quiet --no-deps -r examples/requirements-tf-nodeps.txt
	touch $@

demo: $(VENV)/.installed
	./scripts/demo.sh

test: $(VENV)/.installed $(TF_VENV)/.installed
	MLYARD_TF_ENV=$(abspath $(TF_VENV)) $(BIN)/python -m pytest

test-fast: $(VENV)/.installed
	$(BIN)/python -m pytest -m "not slow"

bench: $(VENV)/.installed
	$(BIN)/python bench/launch.py
	$(BIN)/python bench/sched_cycle.py
	$(BIN)/python bench/sched_replay.py
	$(BIN)/python bench/controller_pass.py
	$(BIN)/python bench/recovery.py
	$(BIN)/python bench/monitor_overhead.py
	$(BIN)/python bench/elastic.py
	$(BIN)/python bench/container_overhead.py
	$(BIN)/python bench/scaling.py
	$(BIN)/python bench/datasets.py
	$(BIN)/python bench/dataset_reads.py
	$(BIN)/python bench/cleaning.py

# Copies the web UI's front-end libraries (pinned in frontend/package.json) into the package;
# the copies are committed, so running mlyard needs no npm.
vendor:
	./scripts/vendor-frontend.sh

clean:
	rm -rf $(VENV) $(TF_VENV) build src/*.egg-info
