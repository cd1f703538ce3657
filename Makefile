# gpufleet.lifecycle — the two commands a newcomer needs: `make demo` and `make test`.
SHELL := /bin/bash
.ONESHELL:
.SHELLFLAGS := -eu -o pipefail -c

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Outside the repository: inside it, ansible-test would see the copy as git-ignored files. One folder per checkout (its
# path's hash): two checkouts of the same name (two clones called main) must not remove each other's copy mid-run.
SANITY_ROOT := $(or $(TMPDIR),/tmp)/gpufleet-sanity-$(notdir $(CURDIR))-$(shell printf %s '$(CURDIR)' | cksum | cut -d' ' -f1)/ansible_collections/gpufleet/lifecycle
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/.collections:$(CURDIR)/$(VENV)/lib/python3.11/site-packages
export ANSIBLE_HOST_KEY_CHECKING := False
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: test venv lint ruff ansible-lint sanity unit integration build demo bench molecule clean

test: venv lint sanity unit integration build ## everything CI runs

$(STAMP): requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	touch $@

venv: $(STAMP) .collections/ansible_collections/gpufleet/lifecycle

.collections/ansible_collections/gpufleet/lifecycle:
	mkdir -p $(@D)
	ln -sfn $(CURDIR) $@

lint: ruff ansible-lint

ruff: venv
	$(BIN)/ruff check .

ansible-lint: venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-lint --offline

# ansible-test needs the collection under ansible_collections/<ns>/<name>: copy the
# files git knows (tracked and not ignored) there and run it on the copy.
sanity: venv
	$(BIN)/python tests/sanity/offline-pip-bootstrap.py
	rm -rf $(SANITY_ROOT) && mkdir -p $(SANITY_ROOT)
	git ls-files -z -co --exclude-standard -- . ':!tests/gpusim' ':!bench' | \
		tar --null --ignore-failed-read -T - -cf - | tar -xf - -C $(SANITY_ROOT)
	cd $(SANITY_ROOT) && PATH=$(CURDIR)/$(BIN):$$PATH $(CURDIR)/$(BIN)/ansible-test sanity --venv --python 3.11 --color no $(SANITY_ARGS)

unit: venv
	$(BIN)/python -m pytest tests/unit -q -n auto -p no:cacheprovider

# Two files at a time (each file its own fleet, loopback range and Slurm ports; a file never splits, so its fleet is
# brought up once): the simulated fleets wait on Slurm, reboots and polls, and another file's tasks use that time.
# INTEGRATION_WORKERS=0 runs them one after the other.
INTEGRATION_WORKERS ?= 2
integration: venv
	$(BIN)/python -m pytest tests/integration -q -p no:cacheprovider -m integration -n $(INTEGRATION_WORKERS) --dist loadfile --no-loadscope-reorder --durations=30

build: venv
	rm -rf build/dist && mkdir -p build/dist build/installed
	$(BIN)/ansible-galaxy collection build --output-path build/dist --force .
	$(BIN)/ansible-galaxy collection install --offline --force -p build/installed build/dist/gpufleet-lifecycle-*.tar.gz
	ANSIBLE_COLLECTIONS_PATH=$(CURDIR)/build/installed $(BIN)/ansible-doc gpufleet.lifecycle.gpu_facts > /dev/null
	@echo "built and installed build/dist/$$(ls build/dist)"

bench: venv ## figures: parse and report speed, memory
	for b in bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || echo "($$b did not run)"; done

molecule: venv ## every molecule scenario (extensions/molecule) against simulated fleets (needs root); make test runs nvidia_driver's
	tests/molecule/run.sh

demo: venv ## a 24-node simulated fleet: audited, then rolled out (canary, waves, one fault rolled back), reports (needs root)
	tests/gpusim/demo.sh

clean:
	rm -rf build .collections tests/output .pytest_cache .ruff_cache
