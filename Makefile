# gpucourse: the two set-up commands are `make book` and `make test`.
# Each creates .venv and installs the pinned stack (requirements.lock) when it is
# missing or out of date, so both work first on a fresh clone.

SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The CPU machine builds and tests on Numba's CUDA simulator.
export GPUCOURSE_DEVICE ?= sim

.PHONY: book test lab instructor grade grade-merge exercises check lock clean help

help:
	@echo "make book       build the book into _build/html (executes every chapter)"
	@echo "make test       run the test suite"
	@echo "make lab        open JupyterLab on exercises/ (the student's view)"
	@echo "make check      self-check: points earned per exercise (NB=path to one notebook;"
	@echo "                VERBOSE=1 adds each failing cell's traceback; kernels run under the"
	@echo "                simulator's sanitizer: unwritten shared reads, skipped barriers, races)"
	@echo "make instructor instructors: JupyterLab on the course with nbgrader's tools"
	@echo "make grade      instructors: grade SUBMISSIONS=folder-or-zip [CHAPTER=name] [JOBS=n] [SHARD=k/n]"
	@echo "make grade-merge instructors: merge the shares of SHARD= runs [SHARDS=folders]"
	@echo "make exercises  instructors: regenerate exercises/ from solutions/"
	@echo "make lock       maintainers: re-pin requirements.lock from pyproject.toml"

$(STAMP): requirements.lock pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "gpucourse needs Python 3.11 or newer; run make PYTHON=/path/to/python3.11")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	@touch $(STAMP)

book: $(STAMP)
	$(BIN)/jupyter-book build . -W -n --keep-going
	@echo "Open _build/html/index.html"

# Test files run side by side, one process per core (the book build is one long test).
# One pytest worker more than the cores: much of the suite waits (nbgrader's kernels
# starting, exercises that hang until their timeout, the PTX compiler process), and
# a third worker on two cores fills those waits (862 s of pytest with two, 639 s with
# three, on the same 2-core machine, 2026-11-28).
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))

test: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=12

# Two doors to JupyterLab. Each reads its settings from its folder in jupyter/,
# put first on Jupyter's config path (above the user's home and the environment):
# the student's hides nbgrader's instructor tools, the instructor's shows them.
# Neither shows Jupyter's news pop-up. The environment's programs come first on
# PATH, as if it were activated (nbgrader's formgrader calls its `alembic` by
# name, and notebooks' shell commands find the course's python). LAB_OPTIONS adds
# options (the tests pass a port and a token). JupyterLab refuses to run as root
# unless told (containers often run as root).
JUPYTERLAB = JUPYTER_CONFIG_PATH="$(CURDIR)/jupyter/$(1)$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
	PATH="$(abspath $(BIN)):$$PATH" \
	$(BIN)/jupyter lab --ServerApp.root_dir=$(2) $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_OPTIONS)

lab: $(STAMP)
	$(call JUPYTERLAB,student,exercises)

instructor: $(STAMP)
	$(call JUPYTERLAB,instructor,.)

# Grades a folder or zip of submissions into gradebook.db, feedback/ and grades.csv,
# JOBS at a time (default: the machine's cores). SHARD=k/n grades only the k-th of
# n shares, into shards/k-of-n (one job of a cluster's array each); grade-merge
# then merges the shares (SHARDS, default every folder in shards/) into the course.
grade: $(STAMP)
	@test -n "$(SUBMISSIONS)" || { echo "usage: make grade SUBMISSIONS=folder-or-zip [CHAPTER=name] [JOBS=n] [SHARD=k/n]"; exit 2; }
	$(BIN)/python -m gpucourse.instructor grade "$(SUBMISSIONS)" $(if $(CHAPTER),--chapter $(CHAPTER)) \
		$(if $(JOBS),--jobs $(JOBS)) $(if $(SHARD),--shard $(SHARD))

SHARDS ?= $(wildcard shards/*-of-*)
grade-merge: $(STAMP)
	@test -n "$(SHARDS)" || { echo "usage: make grade-merge [SHARDS='shards/1-of-4 ...'] (none found in shards/)"; exit 2; }
	$(BIN)/python -m gpucourse.instructor merge $(SHARDS)

NB ?= $(wildcard exercises/*/*.ipynb)
check: $(STAMP)
	$(BIN)/python -m gpucourse.grading check $(if $(VERBOSE),--verbose) $(NB)

exercises: $(STAMP)
	$(BIN)/python -m gpucourse.grading exercises --root .

lock:
	rm -rf /tmp/gpucourse-lock && $(PYTHON) -m venv /tmp/gpucourse-lock
	/tmp/gpucourse-lock/bin/python -m pip install --quiet -e '.[kernels,course]'
	( echo "# Exact versions for the course environment (.venv), made with pip freeze on Python 3.11."; \
	  echo "# Regenerate with \`make lock\` after changing pyproject.toml."; \
	  /tmp/gpucourse-lock/bin/python -m pip freeze --exclude-editable | sed -E 's/^(torch==[^+]*)\+cpu$$/\1/' ) > requirements.lock

clean:
	rm -rf _build .pytest_cache
