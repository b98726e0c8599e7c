# Shortcuts for the commands in README.md and docs/getting-started.md. Each target first runs
# scripts/bootstrap.sh, which installs what is missing and does nothing the second time: as
# root (Mininet) for the emulated runs and the tests; with --user, no root, for the simulated
# clock and the analysis (paper-sim, figures; docs/install.md).
PYTHON := .venv/bin/python
# Where make figures and make paper-sim draw: figures/ (ignored by git), so that neither
# replaces the reference figures unasked. Maintainers redraw those with FIGURES=docs/figures.
FIGURES ?= figures
PAPER_CONFIGS := ate_vs_workers_16 tat_vs_size tat_inflation_vs_loss loss_timeline pool_size_sensitivity training_speedup training_convergence \
	hierarchical shared_switch training_speedup_layers
# Every other config in configs/, and why `make paper` leaves it out (tests/test_bad_input.py holds the two lists to configs/):
# 8workers is the main job (make run), ate_vs_workers the lighter ate_vs_workers_16, ddp_script, training_torch and
# training_torch_comm need PyTorch; paper_* are the simulated clock's (make paper-sim), multi_tenant too (make multi-tenant-sim);
# multi_tenant_emulated runs once per method and budget (make multi-tenant).
NOT_IN_PAPER := 8workers ate_vs_workers ddp_script training_torch training_torch_comm multi_tenant multi_tenant_emulated
# The paper's figures at the paper's scale (100 Gbit/s, 1 us links, 1 ms timeout) on the simulated clock: no root, no Mininet.
PAPER_SIM_CONFIGS := paper_ate_vs_workers paper_tat_vs_size paper_pool_size_sensitivity paper_tat_inflation_vs_loss paper_training_speedup
# The single-job and loss figures with ATP beside SwitchML (issue 42), drawn apart from the SwitchML ones as $(FIGURES)/paper_atp_*:
# a figure is drawn from the newest run that provides it, so one analysis of both sets would replace paper_ate_vs_workers.
PAPER_SIM_ATP_CONFIGS := paper_atp_ate_vs_workers paper_atp_tat_inflation_vs_loss
# The multi-tenant figure's runs: each in-network method over a sweep of the register budget (switch.max_pool_size),
# one run per (method, budget) into the config's folder (docs/figures.md, "Multi-tenant"); the third argument is the
# clock's options (default: the simulated clock on the embedded switch's contract).
MULTI_TENANT_METHODS := switchml atp
MULTI_TENANT_BUDGETS := 64 128 256 512 1024
MULTI_TENANT_EMULATED_BUDGETS := 16 32 64
PAPER_MULTI_TENANT_BUDGETS := 128 256 512 1024 2048
multi_tenant_runs = for method in $(MULTI_TENANT_METHODS); do for budget in $(2); do \
	$(PYTHON) run_experiment.py configs/$(1).yaml $(or $(3),--simulate --switch embedded) --set "methods=[$$method]" --set switch.max_pool_size=$$budget || exit 1; \
	done; done

.PHONY: setup setup-user run test test-fast bench paper paper-sim multi-tenant multi-tenant-sim figures notebooks

setup:  ## as root: the Debian packages, .venv and the eBPF object
	./scripts/bootstrap.sh

setup-user:  ## without root: .venv alone (the simulated clock and the analysis)
	./scripts/bootstrap.sh --user

run: setup  ## the main job: configs/8workers.yaml
	$(PYTHON) run_experiment.py configs/8workers.yaml

test: setup  ## the whole test suite
	$(PYTHON) -m pytest

test-fast: setup  ## the suite without the Mininet end-to-end runs
	$(PYTHON) -m pytest -m "not slow"

bench: setup  ## embedded switch throughput (results/benchmarks/)
	$(PYTHON) benchmarks/switchml/switch_throughput.py

paper: setup  ## every paper-figure experiment, then the figures
	for config in $(PAPER_CONFIGS); do $(PYTHON) run_experiment.py configs/$$config.yaml || exit 1; done
	$(MAKE) figures

paper-sim: setup-user  ## the paper-scale configs with --simulate, then their figures as $(FIGURES)/paper_*
	for config in $(PAPER_SIM_CONFIGS) $(PAPER_SIM_ATP_CONFIGS) paper_hierarchical paper_training_speedup_10g; do $(PYTHON) run_experiment.py configs/$$config.yaml --simulate || exit 1; done
	$(PYTHON) -m analysis $(PAPER_SIM_CONFIGS:%=results/%) --out $(FIGURES) --prefix paper_ --clock simulated
	$(PYTHON) -m analysis $(PAPER_SIM_ATP_CONFIGS:%=results/%) --out $(FIGURES) --prefix paper_atp_ --clock simulated
	$(PYTHON) -m analysis results/paper_hierarchical --out $(FIGURES) --prefix paper_hierarchical_ --clock simulated
	$(PYTHON) -m analysis results/paper_training_speedup_10g --out $(FIGURES) --prefix paper_10g_ --clock simulated
	$(call multi_tenant_runs,paper_multi_tenant,$(PAPER_MULTI_TENANT_BUDGETS))
	$(PYTHON) -m analysis results/paper_multi_tenant --out $(FIGURES) --prefix paper_ --clock simulated

multi-tenant: setup  ## the same in Mininet at the switch target's link rate (configs/multi_tenant_emulated.yaml), drawn as $(FIGURES)/emulated_multi_tenant
	$(call multi_tenant_runs,multi_tenant_emulated,$(MULTI_TENANT_EMULATED_BUDGETS),--switch auto)
	$(PYTHON) -m analysis results/multi_tenant_emulated --out $(FIGURES) --prefix emulated_ --clock emulated

multi-tenant-sim: setup-user  ## SwitchML and ATP jobs sharing a switch over a budget sweep (configs/multi_tenant.yaml, simulated), then the figure
	$(call multi_tenant_runs,multi_tenant,$(MULTI_TENANT_BUDGETS))
	$(PYTHON) -m analysis results/multi_tenant --out $(FIGURES) --clock simulated

figures: setup-user  ## draw $(FIGURES) from every emulated run under results/ (paper-sim draws the simulated ones)
	$(PYTHON) -m analysis results/ --out $(FIGURES) --clock emulated

notebooks: setup  ## regenerate the per-figure notebooks
	$(PYTHON) -m analysis.notebooks.build
