# Set-up and main targets. `make run` and `make test` work on a fresh machine: they create
# .venv, install torch==2.13.0 first (a CPU wheel; a bare `torch` would pull a CUDA build),
# then the project.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check
STAMP  := $(VENV)/.installed
TSTAMP := $(VENV)/.installed-test
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: help install corpus run report test test-fast drill clean sysdeps peers docs

help:
	@echo "make run        install (first time), fetch Flask 3.1.3, run python -m rag.run"
	@echo "make test       install with test extras, run the whole test suite"
	@echo "make test-fast  the edit loop: tests without the integration and slow ones"
	@echo "make drill      the loopback fault drills (503 tracking server, damaged build, Host, secrets, soak)"
	@echo "make report     rewrite reports/ledger.md from mlflow.db"
	@echo "make docs       build the documentation site into site/ (warnings are errors)"
	@echo "make peers      install the peers evaluated through rag (semble 0.7.0)"

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e .
	@# bytecode for the package, written even under PYTHONDONTWRITEBYTECODE=1: without it every
	@# cold `rag search` compiles ~27k lines again (+0.35 s on 2 cores); stale files are recompiled
	$(PY) -m compileall -q rag >/dev/null
	@touch $@

$(TSTAMP): $(STAMP)
	$(PIP) install -q -e '.[test]'
	@touch $@

install: $(STAMP)

# peers evaluated through rag (rag/peers/): semble 0.7.0 (MinishLab's code search), run by
# rag/peers/semble_worker.py in a venv of its own: its huggingface_hub, tokenizers and
# tree-sitter pins clash with rag's. Optional: when it cannot be installed, semble's rows are
# skipped with the reason and make carries on (the stamp is then not written, so the next make
# tries again). ripgrep, the other peer, comes from `make sysdeps`.
SEMBLE_VENV  ?= .venv-peers/semble
SEMBLE_PY    := $(SEMBLE_VENV)/bin/python
SEMBLE_STAMP := $(SEMBLE_VENV)/.installed

$(SEMBLE_STAMP): peers/semble/requirements.txt
	@{ { test -x $(SEMBLE_PY) || $(PYTHON) -m venv $(SEMBLE_VENV); } \
	   && $(SEMBLE_PY) -m pip --disable-pip-version-check install -q -r peers/semble/requirements.txt \
	   && touch $@; } \
	  || echo "note: semble 0.7.0 could not be installed in $(SEMBLE_VENV): semble's rows will be skipped"

peers: $(SEMBLE_STAMP)

corpus: $(STAMP)
	$(PY) -m rag.corpus.fetch flask==3.1.3

# the ledger row, then the published build that `rag search` and `rag serve` read (its
# embeddings come from the run's cache: nothing is embedded twice)
run: $(STAMP) peers
	$(PY) -m rag.run
	$(VENV)/bin/rag index

report: $(STAMP)
	$(PY) -m rag.report

# the documentation site (mkdocs.yml; the configuration reference is generated from the
# schema by docs/_hooks/generate.py), into site/, any warning an error
docs: $(TSTAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# system packages the tests use where present: ripgrep (the grep channel's rg backend);
# without it (no apt, no root) the channel runs in Python and the parity test is skipped.
# Debian's nodejs + npm: `npm pack` fetches the TypeScript corpus (corpus=zod); without it
# that corpus cannot be fetched, and nothing else needs it (its unit tests use a fake npm)
# Debian's postgresql: only its server binaries (initdb, postgres under
# /usr/lib/postgresql/<ver>/bin), for the team-ledger test (an mlflow server on PostgreSQL,
# started and stopped by the test on a unix socket of its own); no main cluster is created,
# nothing is started; without it that test is skipped
# Debian's chromium: headless screenshots of the MLflow UI (`rag ledger screenshots`,
# tests/ledger/test_ledger_screenshots.py); without it that test is skipped
sysdeps:
	@command -v rg >/dev/null 2>&1 || apt-get install -y -q ripgrep >/dev/null 2>&1 \
	  || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q ripgrep >/dev/null 2>&1) \
	  || echo "note: ripgrep not installed: the grep channel uses its Python backend"
	@command -v npm >/dev/null 2>&1 || apt-get install -y -q nodejs npm >/dev/null 2>&1 \
	  || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q nodejs npm >/dev/null 2>&1) \
	  || echo "note: npm not installed (apt-get unavailable or not root): corpus=zod cannot be fetched; install nodejs and npm by hand to use it"
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 \
	  || { { mkdir -p /etc/postgresql-common/createcluster.d \
	         && echo "create_main_cluster = false" \
	            > /etc/postgresql-common/createcluster.d/rag-no-main-cluster.conf; } 2>/dev/null; \
	       apt-get install -y -q postgresql >/dev/null 2>&1 \
	       || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q postgresql >/dev/null 2>&1); } \
	  || echo "note: postgresql not installed (apt-get unavailable or not root): tests/ledger/test_team_ledger.py's PostgreSQL test is skipped; install Debian's postgresql by hand to run it"
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
	  || apt-get install -y -q chromium >/dev/null 2>&1 \
	  || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1) \
	  || echo "note: chromium not installed (apt-get unavailable or not root): rag ledger screenshots cannot run and tests/ledger/test_ledger_screenshots.py is skipped; install Debian's chromium by hand to use it"

# the whole suite on every core (pytest-xdist), one worker more than cores (many tests wait on
# another process or a server), one test file per worker at a time (module fixtures are built
# once); TEST_WORKERS=0 runs it in this process
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
test: $(TSTAMP) sysdeps peers
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

test-fast: $(TSTAMP) sysdeps peers
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not integration and not slow"

# the fault drills of issue 27 that run on loopback (rag/bench/drills.py: a tracking server
# answering 503, then recovering; a damaged build; a foreign Host header; token-shaped
# secrets), one PASS / FAIL / SKIP line each; minutes on 2 cores, so not part of `make test`
# (their cases are regression tests there). DRILLS="tracking-503 secrets" runs some.
DRILLS ?=
drill: $(STAMP)
	$(PY) -m rag.bench.drills $(if $(DRILLS),--only $(DRILLS))

clean:
	rm -rf $(VENV) .venv-peers outputs multirun .pytest_cache site
