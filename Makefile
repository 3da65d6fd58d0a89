# Two commands do everything on a fresh Debian machine (as root): they install what is
# missing, start a Docker engine if none answers (and stop it afterwards), build images
# when they are missing, then run.
.PHONY: accept test setup lint format bench sample-bundle clean

accept: setup
	GATE="$(GATE)" scripts/with-engine.sh scripts/accept.sh $(ARGS)

test: setup
	scripts/with-engine.sh scripts/test.sh

setup:
	scripts/setup.sh

lint: setup
	.venv/bin/ruff check src tests benchmarks scripts
	.venv/bin/ruff format --check src tests benchmarks scripts

format: setup
	.venv/bin/ruff format src tests benchmarks scripts
	.venv/bin/ruff check --fix src tests benchmarks scripts

bench: setup
	scripts/with-engine.sh .venv/bin/python benchmarks/cluster_lifecycle.py

sample-bundle: setup
	scripts/with-engine.sh .venv/bin/python scripts/sample_bundle.py

clean:
	-.venv/bin/dd-accept cluster prune
	rm -rf .venv .pytest_cache .ruff_cache
