# Exactly-once Cloud Functions in Python: every entry point of the project.
# `make help` lists the targets. Each target installs what it needs (incrementally).

SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV        := venv
PY          := $(VENV)/bin/python
FIREBASE_DIR := tools/firebase
EMULATORS   := $(PY) tools/emulators.py
STAMP_PY    := $(VENV)/.installed
STAMP_NODE  := $(FIREBASE_DIR)/node_modules/.installed

# Deployment settings (deploy-*, ttl, topics): make deploy-gcloud PROJECT=my-project REGION=europe-west1
PROJECT ?=
REGION  ?= us-central1

.PHONY: help install demo test lint format check emulators bench deploy-firebase deploy-gcloud \
        ttl topics clean

help: ## List the targets.
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

install: $(STAMP_PY) $(STAMP_NODE) ## Python 3.12 venv and the pinned Firebase CLI (incremental).

# The Firebase CLI needs the venv at exactly <functions source>/venv, built with the runtime's
# Python (python312 in firebase.json).
$(STAMP_PY): requirements.txt requirements-dev.txt tools/find-python.sh
	@python=$$(tools/find-python.sh) || exit 1; \
	if [ -x $(PY) ] && ! $(PY) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then \
	  echo "Recreating $(VENV): it was not built with Python 3.12."; rm -rf $(VENV); fi; \
	[ -x $(PY) ] || "$$python" -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $@

$(STAMP_NODE): $(FIREBASE_DIR)/package.json $(FIREBASE_DIR)/package-lock.json
	@command -v npm >/dev/null || { echo "error: npm not found: install Node.js 20 or newer (https://nodejs.org)."; exit 1; }
	cd $(FIREBASE_DIR) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

demo: install ## The main job: the scripted story on the local emulators, checked row by row.
	$(EMULATORS) exec -- $(PY) -m demo

test: install ## All tests, against the real Firestore, Pub/Sub and Functions emulators.
	$(EMULATORS) exec -- $(PY) -m pytest

lint: $(STAMP_PY) ## ruff check, ruff format --check, mypy.
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy dedup functions main.py tools/emulators.py

format: $(STAMP_PY) ## Apply ruff's fixes and formatting.
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

check: lint test ## What CI runs.

emulators: install ## Start the emulators in the foreground (Ctrl-C stops them).
	$(EMULATORS) start

bench: install ## The price of exactly-once, measured on the Firestore emulator.
	@echo "make bench: not built yet (issue 6)."

deploy-firebase: install ## Deploy with the Firebase CLI: make deploy-firebase PROJECT=...
	@echo "make deploy-firebase: not built yet (issue 4)."

deploy-gcloud: ## Deploy with gcloud (2nd gen): make deploy-gcloud PROJECT=... REGION=...
	@echo "make deploy-gcloud: not built yet (issue 4)."

ttl: ## Create the TTL policy on triggerEvents.expireAt.
	@echo "make ttl: not built yet (issue 4)."

topics: ## Create the Pub/Sub topics the functions use.
	@echo "make topics: not built yet (issue 4)."

clean: ## Remove the venv, the Firebase CLI, caches and emulator logs.
	rm -rf $(VENV) $(FIREBASE_DIR)/node_modules .cache .pytest_cache .mypy_cache .ruff_cache *-debug.log
