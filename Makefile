# Two commands on a fresh machine: `make run` runs Continuity, `make test` runs every check.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: install tools run up test lint typecheck unit sdk-ts bench lock clean

$(VENV)/.installed: pyproject.toml requirements.lock sdk/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	# The runner SDK, its own distribution; its dependencies are already in the lock file.
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e sdk/python
	touch $@

install: $(VENV)/.installed

# promtool and prometheus for the rule and scrape tests, Chromium for the console's browser
# tests (Debian's packages; needs root). Playwright drives that Chromium: it never downloads one.
tools:
	@command -v promtool >/dev/null 2>&1 || { \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
	@command -v chromium >/dev/null 2>&1 || { \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

# The demo: embedded NATS and Redis, the four services, a simulated runner fleet and operator.
run: install
	$(BIN)/continuity up --demo

# The services alone, until Ctrl-C (NATS_URL / REDIS_URL select existing servers). It prints
# the export lines for a second terminal and writes them to .continuity/env, which the other
# commands read; `. .venv/bin/activate` puts `continuity` on PATH.
up: install
	$(BIN)/continuity up

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy
	$(BIN)/mypy --strict sdk/python/examples

unit: install tools
	$(BIN)/pytest

# The TypeScript runner SDK: type-checked build and node's test runner against real servers and
# the four services (node and npm on PATH; npm ci installs from the lock file).
sdk-ts: install
	cd sdk/typescript && npm ci --no-audit --no-fund --loglevel=error && npm test

test: lint typecheck unit sdk-ts

bench: install
	$(BIN)/continuity bench sessions
	$(BIN)/continuity bench pipeline

# Re-resolve dependencies after editing pyproject.toml.
lock: install
	$(BIN)/pip install --quiet uv
	$(BIN)/uv lock
	$(BIN)/uv export --quiet --format requirements-txt --extra dev --no-emit-project -o requirements.lock
	$(BIN)/uv export --quiet --frozen --format requirements-txt --no-emit-project -o deploy/requirements-runtime.lock

clean:
	rm -rf $(VENV) .continuity .pytest_cache .mypy_cache .ruff_cache sdk/typescript/node_modules sdk/typescript/dist
