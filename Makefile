# Aliases for the README's two commands; tasks.py does the work (and runs on Windows too).
PYTHON ?= python3

.PHONY: run test

run:
	$(PYTHON) tasks.py run

test:
	$(PYTHON) tasks.py test
