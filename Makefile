# Exactly-once Cloud Functions in Python: every entry point of the project.
# `make help` lists the targets. Each target installs what it needs (incrementally).

SHELL := /bin/bash
.DEFAULT_GOAL := help
# Python may keep its bytecode (__pycache__/, ignored by git): with PYTHONDONTWRITEBYTECODE set,
# every pytest run would rewrite and compile each test module again, and every Python the tests
# start would compile the project's modules again (docs/testing.md, "Time and CPU").
unexport PYTHONDONTWRITEBYTECODE

VENV        := venv
PY          := $(VENV)/bin/python
FIREBASE_DIR := tools/firebase
EMULATORS   := $(PY) tools/emulators.py
STAMP_PY    := $(VENV)/.installed
STAMP_NODE  := $(FIREBASE_DIR)/node_modules/.installed

# Deployment settings (bootstrap, deploy-*, rules, ttl, topics, queues), e.g.
#   make deploy-gcloud PROJECT=my-project REGION=europe-west1
# Every function, its trigger and its runtime shape come from main.py (tools/deploy builds
# the manifest); these only say where. See docs/deploy.md.
PROJECT ?=
REGION  ?= us-central1
# Where the Firestore database lives (nam5, eur3 or a region); empty: read at deploy time.
FIRESTORE_LOCATION ?=
# The Storage trigger's bucket location (read with gcloud at deploy time when empty).
BUCKET_LOCATION ?=
# The runtime service account (name or email) that make bootstrap creates and the functions run as.
SERVICE_ACCOUNT ?= exactly-once-fn
# The project's number, for the service agents; empty: read with gcloud at deploy time.
PROJECT_NUMBER ?=
# Topics to create besides the triggers' (for example the ones relay_outbox publishes to).
TOPICS ?=
# Secret versions deploy-gcloud pins ("NAME=3 OTHER=1"); empty: each latest, read at deploy time.
SECRET_VERSIONS ?=
# Notification channels of the alert `make monitoring` creates (ids or full names, space-separated).
ALERT_CHANNELS ?=
DEDUP_COLLECTION ?= triggerEvents
# The Firestore database of the records, for make ttl; empty: (default).
DATABASE ?=
SOAK_SECONDS ?= 600# how long `make soak` injects faults before it drains and checks
# make simulate: for SIM_SECONDS, or SEEDS runs, or replay the one run SEED (docs/simulation.md).
SIM_SECONDS ?= 60
SEEDS ?=
SEED ?=
DEPLOY := $(PY) -m tools.deploy
DEPLOY_ARGS = --project=$(PROJECT) --region=$(REGION) --firestore-location=$(FIRESTORE_LOCATION) \
  --service-account=$(SERVICE_ACCOUNT) --project-number=$(PROJECT_NUMBER) --topics="$(TOPICS)" \
  --alert-channels="$(ALERT_CHANNELS)" --secret-versions="$(SECRET_VERSIONS)" \
  --bucket-location=$(BUCKET_LOCATION)
define newline


endef
# $(call planned,WHAT): the commands tools/deploy plans for WHAT, each its own recipe line, so
# `make -n WHAT` prints them; a plan that cannot be made (its error is printed) fails the target,
# under -n too. Planning asks the cloud nothing: a value only it knows (a secret's latest version,
# a location, the project's number) is read by a command of the plan, when it runs.
planned = $(subst ;;,$(newline),$(shell $(DEPLOY) plan $(1) $(DEPLOY_ARGS) --make))$(if \
  $(filter-out 0,$(.SHELLSTATUS)),$(error make $(1): the plan was refused (the error above)))

.PHONY: help install demo test unit docs lint format check emulators bench soak deploy-firebase \
        deploy-gcloud deploy-run run-names bootstrap rules ttl topics queues monitoring simulate \
        guard-project clean

help: ## List the targets.
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

# The venv's Python: PYTHON= when given, else the first of 3.13, 3.14, 3.12 found
# (tools/find-python.sh, docs/emulators.md). Each install makes that choice again: a venv built
# with another version is removed, saying so, and built anew. The deploy runtime follows the
# venv (tools/runtime.py): install writes it into firebase.json, whose runtime the Firebase CLI
# reads to deploy and to start the venv's python3.X in the Functions emulator.
install: $(STAMP_PY) $(STAMP_NODE) ## The venv (Python 3.13, 3.14 or 3.12; PYTHON= to choose), the Firebase CLI.
	@tools/find-python.sh --venv $(VENV) >/dev/null
	@[ -f $(STAMP_PY) ] || $(MAKE) --no-print-directory $(STAMP_PY)
	@$(PY) -m tools.runtime sync

# A missing venv is built with the chosen Python; the targets that need only the venv (unit,
# lint, deploy-gcloud...) use the one there is.
$(STAMP_PY): requirements.txt requirements-dev.txt pyproject.toml tools/find-python.sh
	@python=$$(tools/find-python.sh --venv $(VENV)) || exit 1; \
	[ -x $(PY) ] || { echo "Building $(VENV) with $$python"; "$$python" -m venv $(VENV); }
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e '.[cli]'
	@$(PY) -m tools.runtime sync
	@touch $@

# --ignore-scripts: of the CLI's dependencies only two have install scripts, and neither is
# needed here. re2 builds a native regex engine (downloaded, or compiled with node-gyp where
# nothing downloads: 45 s) that superstatic and ajv only try to load, falling back to RegExp,
# for Hosting rewrites; protobufjs's postinstall firebase-tools itself does not allow
# (its package.json `allowScripts`).
$(STAMP_NODE): $(FIREBASE_DIR)/package.json $(FIREBASE_DIR)/package-lock.json
	@command -v npm >/dev/null || { echo "error: npm not found: install Node.js 20 or newer (https://nodejs.org)."; exit 1; }
	cd $(FIREBASE_DIR) && npm ci --no-audit --no-fund --loglevel=error --ignore-scripts
	@touch $@

# The Functions emulator serves the HTTP and callable functions the demo calls with the Auth
# emulator's ID tokens (the Cloud Tasks emulator starts only beside it, firebase-tools); the demo
# switches its background triggers off, since it delivers every event itself.
demo: install ## The main job: the scripted story on the local emulators, checked row by row.
	$(EMULATORS) exec --only firestore,pubsub,auth,functions,tasks,eventarc -- $(PY) -m demo

# T= a test file, folder or node id; K= a name expression (pytest -k): `make test T=tests/cli K=purge`
T ?=
K ?=
# The whole suite runs the tests that need no emulator beside those that do (tools/test_runner.py).
test: install ## All tests on the emulators; one file or test: make test T=tests/dedup/test_lease.py K=expired
	$(EMULATORS) exec -- $(PY) -m tools.test_runner $(T) $(if $(K),-k '$(K)')

# The wheel test (marker `packaging`, about a minute) and the deploy harness (marker
# `deploy_harness`, a few minutes) need no emulator either; `make test` runs them.
# The whole selection runs on every core (pytest-xdist: the matrix and the simulator's searches
# compute); one file or test (T=) in one process, which starts sooner.
unit: $(STAMP_PY) ## The tests that need no emulator (no Java, no Node), in seconds.
	env -u FIRESTORE_EMULATOR_HOST -u PUBSUB_EMULATOR_HOST -u FIREBASE_EMULATOR_HUB \
	  $(PY) -m pytest -m 'not needs_emulators and not packaging and not subprocesses and not deploy_harness' \
	  $(if $(T),,-n auto) $(T) $(if $(K),-k '$(K)')

docs: $(STAMP_PY) ## Regenerate the generated parts of README.md and docs/ (tests check they are current).
	$(PY) -m tools.docs

lint: $(STAMP_PY) ## ruff check, ruff format --check, mypy (--strict on the dedup library).
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy --strict dedup
	$(VENV)/bin/mypy dedup functions demo bench tests main.py tools/__init__.py tools/emulators.py \
	  tools/deploy tools/deploy_run.py tools/run_service.py tools/run_build.py tools/runtime.py tools/test_runner.py tools/exports.py tools/docs.py docs/examples sim

# Formats even when `ruff check` finds something it cannot fix (and then still fails, naming it).
format: $(STAMP_PY) ## Apply ruff's fixes and formatting.
	@$(VENV)/bin/ruff check --fix .; findings=$$?; $(VENV)/bin/ruff format . && exit $$findings

check: lint test ## What CI runs.

emulators: install ## Start the emulators in the foreground (Ctrl-C stops them).
	$(EMULATORS) start

bench: install ## The price of exactly-once, measured on the Firestore emulator (bench/results.*).
	$(EMULATORS) exec --only firestore -- $(PY) -m bench $(BENCH_ARGS)

soak: $(STAMP_PY) ## Chaos soak on its own emulator (soak/results.json): make soak SOAK_SECONDS=600
	$(PY) -m soak --seconds $(SOAK_SECONDS)

# The real kernel, the HTTP and callable entrances and the operators' commands over a simulated
# Firestore (both concurrency modes) on virtual time, with faults from each seed; writes
# sim/results.json (runs and violations per surface), exits 1 printing the seed of any violation.
simulate: $(STAMP_PY) ## Simulate every surface under faults: SIM_SECONDS=60, or SEEDS=n runs, or SEED=n to replay one with its trace
	$(PY) -m sim $(if $(SEED),--seed $(SEED),$(if $(SEEDS),--seeds $(SEEDS),--seconds $(SIM_SECONDS)))

bootstrap: $(STAMP_PY) guard-project ## Once per project: APIs, runtime service account, its roles.
	$(call planned,bootstrap)
	$(call planned,bootstrap-run)

# The manifest (functions.yaml) lives only while firebase deploys: removed on exit, Ctrl-C,
# SIGTERM or SIGHUP; tools/emulators.py removes a leftover one (the emulator would read it).
# --non-interactive --force: no prompt waits for a person (CI, scripts, no TTY); what --force
# answers for each prompt of a deploy is listed in docs/deploy.md.
deploy-firebase: install guard-project topics ## Deploy functions, rules, indexes + TTL: make deploy-firebase PROJECT=...
	@trap 'rm -f functions.yaml' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; trap 'exit 129' HUP; \
	  set -e; set -x; $(PY) -m tools.runtime check $(or $(shell $(PY) -m tools.runtime 2>/dev/null),unknown); \
	  $(DEPLOY) manifest functions.yaml $(DEPLOY_ARGS); \
	  $(EMULATORS) firebase deploy --only functions,firestore --project $(PROJECT) \
	    --non-interactive --force

# gcloud deploys the same main.py: one `gcloud functions deploy` per function of the manifest.
# Event functions are served as CloudEvent functions (FUNCTION_SIGNATURE_TYPE) with --retry: a
# released lease is only ever retried by the platform.
deploy-gcloud: $(STAMP_PY) guard-project topics queues ## Deploy with gcloud (2nd gen): make deploy-gcloud PROJECT=... REGION=...
	$(DEPLOY) env-files $(DEPLOY_ARGS)
	$(call planned,deploy-gcloud)

# Cloud Run functions (tools/deploy_run.py): one `gcloud run deploy --function` per function of
# the manifest, then each event function's Eventarc trigger, its subscription's retry and
# dead-letter policy, the schedules' jobs and the queues' routing to the run.app URLs.
deploy-run: $(STAMP_PY) guard-project run-names topics queues ## Deploy as Cloud Run functions: make deploy-run PROJECT=... REGION=...
	$(call planned,deploy-run)

# Before anything of deploy-run runs: every service's run.app URL must be able to exist
# (<service>-<project number> within 63 characters), checked with the number read if not given.
run-names: $(STAMP_PY) guard-project
	$(call planned,run-names)

rules: install guard-project ## Deploy firestore.rules and firestore.indexes.json (gcloud users too).
	$(EMULATORS) firebase deploy --only firestore --project $(PROJECT)

# The command is `dedup setup`'s own (its TTL step), so a library user runs the same one.
ttl: $(STAMP_PY) guard-project ## Turn on the TTL policy that deletes dedup records at expireAt (DATABASE= a named one).
	$(shell $(PY) -m dedup setup --only ttl --dry-run --project='$(PROJECT)' \
	  --database='$(or $(DATABASE),(default))' --collection='$(DEDUP_COLLECTION)' || echo '@exit 2')

topics: $(STAMP_PY) guard-project ## Create the triggers' Pub/Sub topics and TOPICS (existing ones are kept).
	$(call planned,topics)

queues: $(STAMP_PY) guard-project ## Create or update the task queue functions' Cloud Tasks queues.
	$(call planned,queues)

# Log-based metrics dedup_dead, dedup_lease_lost, dedup_payload_mismatch, dedup_failed and the
# alert policy "dedup: dead events" (gcloud alpha); see docs/observability.md.
monitoring: $(STAMP_PY) guard-project ## Log-based metrics of bad outcomes + an alert on dead (existing ones kept).
	$(call planned,monitoring)

guard-project:
	@[ -n "$(PROJECT)" ] || { echo "error: set PROJECT, e.g. make $(MAKECMDGOALS) PROJECT=my-project"; exit 2; }

clean: ## Remove the venv, the Firebase CLI, caches and emulator logs.
	rm -rf $(VENV) $(FIREBASE_DIR)/node_modules .cache .pytest_cache .mypy_cache .ruff_cache *-debug.log
