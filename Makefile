# Contributor shortcuts. `make dev` once, then `make test` / `make lint`.
# The Lambda runtime's Python as an absolute path (a pyenv shim runs only while its version is
# selected); the same lookup infra/check-template.sh and `webhook-inbox invoke` use.
PYTHON ?= $(shell python3 tools/webhook_inbox_tools/find_python.py 3.13)
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: dev test lint format build deploy clean ci

dev:            ## virtualenv with the project and its dev tools
	@test -n "$(PYTHON)" || { echo "make dev: no Python 3.13 (above: what was tried); or make dev PYTHON=/path/to/python3.13" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -c layers/shared/constraints.txt -e '.[dev]'

test:           ## the whole suite against a throwaway PostgreSQL and moto
	$(BIN)/pytest

lint:           ## ruff (style + security rules) and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format:
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

build:          ## sam build (needs python3.13 on PATH)
	sam build

deploy:         ## sam deploy with samconfig.toml defaults
	sam deploy

ci:             ## what CI runs
	bash .ci/run

clean:
	rm -rf .aws-sam .venv-ci .pytest_cache .mypy_cache .ruff_cache
