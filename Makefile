# Shortcuts for the commands in README.md. Run as root (Mininet); each target first runs
# scripts/bootstrap.sh, which installs what is missing and does nothing the second time.
PYTHON := .venv/bin/python
PAPER_CONFIGS := ate_vs_workers_16 tat_vs_size tat_inflation_vs_loss loss_timeline pool_size_sensitivity training_speedup training_convergence

.PHONY: setup run test test-fast bench paper figures notebooks

setup:
	./scripts/bootstrap.sh

run: setup  ## the main job: configs/8workers.yaml
	$(PYTHON) run_experiment.py configs/8workers.yaml

test: setup  ## the whole test suite
	$(PYTHON) -m pytest

test-fast: setup  ## the suite without the Mininet end-to-end runs
	$(PYTHON) -m pytest -m "not slow"

bench: setup  ## embedded switch throughput (results/benchmarks/)
	$(PYTHON) benchmarks/switch_throughput.py

paper: setup  ## every paper-figure experiment, then the figures
	for config in $(PAPER_CONFIGS); do $(PYTHON) run_experiment.py configs/$$config.yaml || exit 1; done
	$(MAKE) figures

figures: setup  ## redraw docs/figures from everything under results/
	$(PYTHON) -m analysis results/ --out docs/figures

notebooks: setup  ## regenerate the per-figure notebooks
	$(PYTHON) -m analysis.notebooks.build
