# The two commands: `make dev` and `make test` (see README.md). Everything else is a helper they call.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: dev test stop status install services cluster lint format migrate seed

dev: install
	@bash scripts/dev.sh

test: install
	@bash scripts/test.sh

stop:
	@bash scripts/dev.sh stop

status:
	@bash scripts/dev.sh status

install: $(VENV)/.installed node_modules/.installed locale/zh_Hans/LC_MESSAGES/django.mo

# Compiled translations are built here, never committed (gettext's msgfmt; Debian package gettext).
locale/zh_Hans/LC_MESSAGES/django.mo: locale/zh_Hans/LC_MESSAGES/django.po
	@echo "[install] compiling translations"
	@command -v msgfmt >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gettext >/dev/null)
	@msgfmt --check -o $@ $<

$(VENV)/.installed: requirements.txt requirements-dev.txt
	@echo "[install] Python packages into $(VENV)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -r requirements-dev.txt
	@touch $@

node_modules/.installed: package.json package-lock.json
	@echo "[install] front-end packages from npm"
	@npm ci --no-audit --no-fund --loglevel=error
	@touch $@

services:
	@bash scripts/services.sh

cluster: install
	@$(PY) -m devcluster up

lint: install
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/ruff format --check .
	@$(VENV)/bin/lint-imports

format: install
	@$(VENV)/bin/ruff format .
	@$(VENV)/bin/ruff check --fix .

migrate: install services
	@$(PY) manage.py migrate --noinput

seed: migrate
	@$(PY) manage.py seed_demo
