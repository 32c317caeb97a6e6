#!/usr/bin/env bash
# Assemble BENCHMARKS.md from the result files the bench scripts write (each result file
# carries its own command, machine and date).
set -euo pipefail
cd "$(dirname "$0")/.."
{
  echo "# Benchmarks"
  echo
  echo "Every figure below was measured by the script named in its section, on the machine and"
  echo "date it states; ratios compare against the named baseline in the same run. Re-run with"
  echo "\`make bench\` (or the single script) and then \`bash bench/collect.sh\`."
  for f in bench/scenario_results.md bench/pipeline_results.md bench/bus_results.md bench/drafting_results.md bench/detectors_results.md bench/single_results.md bench/kpi_results.md bench/zones_results.md bench/pm_results.md bench/detectors_notes.md bench/dspine_results.md bench/dspine_b16_results.md bench/dspine_threads2_results.md bench/dspine_scaling_results.md; do
    [ -f "$f" ] || continue
    echo
    sed -e 's/^# /## /' -e 's/^## \(.*\)$/&/' "$f" | sed -e '1!s/^## /### /'
  done
} > BENCHMARKS.md
