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

# Deployment settings (deploy-*, rules, ttl, topics): make deploy-gcloud PROJECT=my-project REGION=europe-west1
PROJECT ?=
REGION  ?= us-central1
FIRESTORE_LOCATION ?= $(REGION)# where the database lives (nam5, eur3, or a region): Firestore triggers must match
ENV_FILE ?= .env.$(PROJECT)# the functions' variables (WEBHOOK_ROUTES, NOTIFY_URL); firebase reads it too
ENV_YAML := .cache/env.$(PROJECT).yaml
DEDUP_COLLECTION ?= triggerEvents
TOPICS ?= webhooks
SOAK_SECONDS ?= 600# how long `make soak` injects faults before it drains and checks
# $(call FIRESTORE_TRIGGER,written|created|updated|deleted,document pattern)
FIRESTORE_TRIGGER = --trigger-event-filters=type=google.cloud.firestore.document.v1.$(1) \
  --trigger-event-filters=database='(default)' \
  --trigger-event-filters-path-pattern=document='$(2)' --trigger-location=$(FIRESTORE_LOCATION)
GCLOUD_DEPLOY = gcloud functions deploy --gen2 --runtime=python312 --region=$(REGION) \
  --project=$(PROJECT) --source=. --retry --env-vars-file=$(ENV_YAML) --quiet

.PHONY: help install demo test unit docs lint format check emulators bench soak deploy-firebase \
        deploy-gcloud rules ttl topics guard-project clean

help: ## List the targets.
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

install: $(STAMP_PY) $(STAMP_NODE) ## Python 3.12 venv (with `dedup` in venv/bin) and the pinned Firebase CLI.

# The Firebase CLI needs the venv at exactly <functions source>/venv, built with the runtime's
# Python (python312 in firebase.json).
$(STAMP_PY): requirements.txt requirements-dev.txt pyproject.toml tools/find-python.sh
	@python=$$(tools/find-python.sh) || exit 1; \
	if [ -x $(PY) ] && ! $(PY) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then \
	  echo "Recreating $(VENV): it was not built with Python 3.12."; rm -rf $(VENV); fi; \
	[ -x $(PY) ] || "$$python" -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e '.[cli]'
	@touch $@

$(STAMP_NODE): $(FIREBASE_DIR)/package.json $(FIREBASE_DIR)/package-lock.json
	@command -v npm >/dev/null || { echo "error: npm not found: install Node.js 20 or newer (https://nodejs.org)."; exit 1; }
	cd $(FIREBASE_DIR) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

demo: install ## The main job: the scripted story on the local emulators, checked row by row.
	$(EMULATORS) exec --only firestore,pubsub -- $(PY) -m demo

# T= a test file, folder or node id; K= a name expression (pytest -k): `make test T=tests/cli K=purge`
T ?=
K ?=
test: install ## All tests on the emulators; one file or test: make test T=tests/dedup/test_lease.py K=expired
	$(EMULATORS) exec -- $(PY) -m pytest $(T) $(if $(K),-k '$(K)')

# The wheel test (marker `packaging`, about a minute) needs no emulator either; `make test` runs it.
unit: $(STAMP_PY) ## The tests that need no emulator (no Java, no Node), in seconds.
	env -u FIRESTORE_EMULATOR_HOST -u PUBSUB_EMULATOR_HOST -u FIREBASE_EMULATOR_HUB \
	  $(PY) -m pytest -m 'not needs_emulators and not packaging' $(T) $(if $(K),-k '$(K)')

docs: $(STAMP_PY) ## Regenerate the generated parts of README.md and docs/ (tests check they are current).
	$(PY) -m tools.docs

lint: $(STAMP_PY) ## ruff check, ruff format --check, mypy (--strict on the dedup library).
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy --strict dedup
	$(VENV)/bin/mypy dedup functions demo bench tests main.py tools/__init__.py tools/emulators.py \
	  tools/deploy.py tools/docs.py docs/examples

format: $(STAMP_PY) ## Apply ruff's fixes and formatting.
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

check: lint test ## What CI runs.

emulators: install ## Start the emulators in the foreground (Ctrl-C stops them).
	$(EMULATORS) start

bench: install ## The price of exactly-once, measured on the Firestore emulator (bench/results.*).
	$(EMULATORS) exec --only firestore -- $(PY) -m bench

soak: $(STAMP_PY) ## Chaos soak on its own emulator (soak/results.json): make soak SOAK_SECONDS=600
	$(PY) -m soak --seconds $(SOAK_SECONDS)

deploy-firebase: install guard-project ## Deploy functions, rules, indexes + TTL: make deploy-firebase PROJECT=...
	$(PY) tools/deploy.py manifest functions.yaml
	$(EMULATORS) firebase deploy --only functions,firestore --project $(PROJECT); \
	  status=$$?; rm -f functions.yaml; exit $$status

# gcloud deploys the same main.py: each firebase-functions handler takes the raw CloudEvent,
# so functions-framework must serve it as a CloudEvent function (FUNCTION_SIGNATURE_TYPE).
# Every event function gets --retry: a released lease is only ever retried by the platform.
deploy-gcloud: $(STAMP_PY) guard-project ## Deploy with gcloud (2nd gen): make deploy-gcloud PROJECT=... REGION=...
	$(PY) tools/deploy.py env-yaml $(ENV_FILE) $(ENV_YAML)
	$(GCLOUD_DEPLOY) sync_published_count --entry-point=sync_published_count \
	  $(call FIRESTORE_TRIGGER,written,posts/{postId})
	$(GCLOUD_DEPLOY) send_post_notification --entry-point=send_post_notification \
	  $(call FIRESTORE_TRIGGER,written,posts/{postId})
	$(GCLOUD_DEPLOY) relay_outbox --entry-point=relay_outbox \
	  $(call FIRESTORE_TRIGGER,created,outbox/{outboxId})
	$(GCLOUD_DEPLOY) forward_webhook --entry-point=forward_webhook \
	  --trigger-topic=webhooks

rules: install guard-project ## Deploy firestore.rules and firestore.indexes.json (gcloud users too).
	$(EMULATORS) firebase deploy --only firestore --project $(PROJECT)

ttl: guard-project ## Turn on the TTL policy that deletes dedup records at expireAt.
	gcloud firestore fields ttls update expireAt --collection-group=$(DEDUP_COLLECTION) \
	  --enable-ttl --project=$(PROJECT) --quiet

topics: guard-project ## Create the Pub/Sub topics the functions use (existing ones are kept).
	$(foreach topic,$(TOPICS),gcloud pubsub topics describe $(topic) --project=$(PROJECT) \
	  >/dev/null 2>&1 || gcloud pubsub topics create $(topic) --project=$(PROJECT);)

guard-project:
	@[ -n "$(PROJECT)" ] || { echo "error: set PROJECT, e.g. make $(MAKECMDGOALS) PROJECT=my-project"; exit 2; }

clean: ## Remove the venv, the Firebase CLI, caches and emulator logs.
	rm -rf $(VENV) $(FIREBASE_DIR)/node_modules .cache .pytest_cache .mypy_cache .ruff_cache *-debug.log
