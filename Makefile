# Loom: `make demo` runs the embedded control plane; `make test` runs the whole suite.
# Neither relies on anything installed by hand: both create .venv and install from requirements/.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432/loom
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: demo test lint bench venv test-postgres test-sqlite

$(STAMP): requirements/base.txt requirements/dev.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements/dev.txt
	# the SDK (sdk/loom) is importable from the venv, as a trainer's `pip install ./sdk` makes it
	echo "$(CURDIR)/sdk" > "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/loom-sdk.pth"
	touch $@

venv: $(STAMP)

demo: $(STAMP)
	$(PY) manage.py demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy .

test-postgres: $(STAMP)
	DATABASE_URL=$(POSTGRES_URL) $(VENV)/bin/pytest --create-db

test-sqlite: $(STAMP)
	DATABASE_URL= $(VENV)/bin/pytest --create-db -m "not e2e and not docker" tests/apps

test: lint test-postgres test-sqlite

bench: $(STAMP)
	$(PY) -m bench all --quick
