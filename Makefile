# Shortcuts for the commands in README.md. Run as root (Mininet); each target first runs
# scripts/bootstrap.sh, which installs what is missing and does nothing the second time.
PYTHON := .venv/bin/python
PAPER_CONFIGS := ate_vs_workers_16 tat_vs_size tat_inflation_vs_loss loss_timeline pool_size_sensitivity training_speedup training_convergence \
	hierarchical shared_switch
# Every other config in configs/, and why `make paper` leaves it out (tests/test_bad_input.py holds the two lists to configs/):
# 8workers is the main job (make run), ate_vs_workers the lighter ate_vs_workers_16, ddp_script, training_torch and
# training_torch_comm need PyTorch; paper_* are the simulated clock's (make paper-sim).
NOT_IN_PAPER := 8workers ate_vs_workers ddp_script training_torch training_torch_comm
# The paper's figures at the paper's scale (100 Gbit/s, 1 us links, 1 ms timeout) on the simulated clock: no root, no Mininet.
PAPER_SIM_CONFIGS := paper_ate_vs_workers paper_tat_vs_size paper_pool_size_sensitivity paper_tat_inflation_vs_loss

.PHONY: setup run test test-fast bench paper paper-sim figures notebooks

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

paper-sim: setup  ## the paper-scale configs with --simulate, then their figures as docs/figures/paper_*
	for config in $(PAPER_SIM_CONFIGS) paper_hierarchical; do $(PYTHON) run_experiment.py configs/$$config.yaml --simulate || exit 1; done
	$(PYTHON) -m analysis $(PAPER_SIM_CONFIGS:%=results/%) --out docs/figures --prefix paper_ --clock simulated
	$(PYTHON) -m analysis results/paper_hierarchical --out docs/figures --prefix paper_hierarchical_ --clock simulated

figures: setup  ## redraw docs/figures from every emulated run under results/ (paper-sim draws the simulated ones)
	$(PYTHON) -m analysis results/ --out docs/figures --clock emulated

notebooks: setup  ## regenerate the per-figure notebooks
	$(PYTHON) -m analysis.notebooks.build
