# Every check CI runs is reachable from here: `make check` = lint + type check + all tests.
VENV := .venv/bin
PYTEST_ARGS ?=
# Tests that run in-process on the shared Spark session, run once more on micro-batches
# (stages run continuous by default).
MICRO_BATCH_AGAIN := integration_tests/test_trust.py integration_tests/test_secured_kafka.py

.PHONY: bootstrap demo test test-slow unit integration lint format check bench clean

bootstrap:
	@bash scripts/bootstrap.sh

demo: bootstrap  ## the main job on the embedded local stack
	$(VENV)/flamepipe demo

test: bootstrap  ## every test: unit (pure; on both cores) then integration (real Kafka, ZooKeeper, Spark)
	$(VENV)/pytest -q -n 2 --timeout=900 -m "not slow" unit_tests $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(VENV)/pytest -q --timeout=900 --durations=30 -m "not slow" integration_tests $(PYTEST_ARGS) || [ $$? -eq 5 ]
	@echo "the security tests again, on micro-batches"
	FLAMEPIPE_EXECUTION=micro-batch $(VENV)/pytest -q --timeout=900 -m "not slow" $(MICRO_BATCH_AGAIN) $(PYTEST_ARGS) || [ $$? -eq 5 ]

test-slow: bootstrap  ## long or not yet reliable tests (crash tests, soaks)
	$(VENV)/pytest -q --timeout=1800 -m slow integration_tests $(PYTEST_ARGS)

unit: bootstrap
	$(VENV)/pytest -q unit_tests $(PYTEST_ARGS)

integration: bootstrap
	$(VENV)/pytest -q --timeout=900 integration_tests $(PYTEST_ARGS)

lint: bootstrap
	$(VENV)/ruff check .
	$(VENV)/ruff format --check .
	$(VENV)/mypy --strict framework connectors

format: bootstrap
	$(VENV)/ruff format .
	$(VENV)/ruff check --fix .

check: lint test

bench: bootstrap
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(VENV)/python $$b || exit 1; done

clean:
	rm -rf .venv .pytest_cache .mypy_cache .ruff_cache .hypothesis
