# Loom: `make demo` runs the embedded control plane; `make test` runs the whole suite.
# Neither relies on anything installed by hand: both create .venv and install from requirements/,
# build the dashboard with npm and install the sandbox's Debian packages (bubblewrap, slirp4netns);
# test also installs Chromium and Docker and starts a throwaway PostgreSQL and Redis where none is
# reachable (deploy/dev/with-services.sh, which stops what it started). `make test-fast`, the edit
# loop's subset, creates .venv and starts the same servers where none answers; it needs no
# dashboard build, Chromium or Docker.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NODE_STAMP := frontend/node_modules/.installed
DIST := frontend/dist/index.html
FRONTEND_SOURCES := $(shell find frontend/src -type f 2>/dev/null) frontend/index.html \
	frontend/vite.config.ts frontend/tsconfig.json
POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432/loom
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: demo test test-all test-fast lint bench venv frontend frontend-test sandbox-deps system-deps \
	test-postgres test-sqlite

$(STAMP): requirements/base.txt requirements/dev.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements/dev.txt
	# the SDK (sdk/loom) is importable from the venv, as a trainer's `pip install ./sdk` makes it
	echo "$(CURDIR)/sdk" > "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/loom-sdk.pth"
	touch $@

venv: $(STAMP)

$(NODE_STAMP): frontend/package.json frontend/package-lock.json
	cd frontend && npm install --no-audit --no-fund
	touch $@

$(DIST): $(NODE_STAMP) $(FRONTEND_SOURCES)
	cd frontend && npm run build

frontend: $(DIST)

frontend-test: $(NODE_STAMP)
	cd frontend && npm test

# Debian packages installed when missing (root with apt-get only; otherwise say what is missing).
# $(1): the packages' "command-or-path:package" pairs; $(2): what happens without them.
define apt_missing
	@missing=""; \
	for pair in $(1); do \
	  probe="$${pair%%:*}"; package="$${pair#*:}"; \
	  { test -x "$$probe" || command -v "$$probe" >/dev/null; } || missing="$$missing $$package"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null \
	      || echo "apt-get install$$missing failed: $(2)"; \
	  else echo "cannot install$$missing: $(2)"; fi; \
	fi
endef

# Local actions run in bubblewrap, network-on tools through slirp4netns (workers/agents/cpu/sandbox.py).
sandbox-deps:
	$(call apt_missing,bwrap:bubblewrap slirp4netns:slirp4netns nft:nftables,actions cannot be sandboxed and the agent will refuse to start)

# Browser tests drive Debian's Chromium; Docker tests start their own dockerd. The tests needing
# them skip with the reason printed when these cannot be installed (no root, no apt).
system-deps: sandbox-deps
	$(call apt_missing,/usr/bin/chromium:chromium dockerd:docker.io busybox:busybox-static,the tests needing them will skip)

demo: $(STAMP) $(DIST) sandbox-deps
	$(PY) manage.py demo

# lint-imports: the import contracts of pyproject.toml (--no-cache: no cache left in the checkout)
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy .
	PYTHONPATH=.:sdk $(VENV)/bin/lint-imports --no-cache

# Tests marked `processes` (tests/conftest.py: they start real processes, dockerd or Chromium, or
# run a benchmark) share cores, the sandbox user's process limit and daemons: one pytest runs them
# one at a time while a second runs the others beside it (its own test database; its output is
# shown after). $(1): DATABASE_URL; $(2): the tests.
define pytest_beside_processes
	others=$$(mktemp); \
	DATABASE_URL=$(1) $(VENV)/bin/pytest --create-db -m "not processes" $(2) >$$others 2>&1 & \
	pid=$$!; \
	DATABASE_URL=$(1) $(VENV)/bin/pytest --create-db -m processes $(2); status=$$?; \
	wait $$pid || status=1; cat $$others; rm -f $$others; exit $$status
endef

test-postgres: $(STAMP) $(DIST) system-deps
	$(call pytest_beside_processes,$(POSTGRES_URL),)

test-sqlite: $(STAMP) $(DIST)
	$(call pytest_beside_processes,,tests/apps)

# The edit loop's subset on PostgreSQL: no test that starts real processes (a test in it that
# starts one fails, saying so), nothing slow.
test-fast: $(STAMP)
	deploy/dev/with-services.sh env DATABASE_URL=$(POSTGRES_URL) \
		$(VENV)/bin/pytest -n auto -m "not processes and not slow"

test:
	deploy/dev/with-services.sh $(MAKE) test-all

test-all: lint frontend-test test-postgres test-sqlite

bench: $(STAMP)
	$(PY) -m bench all --quick
