#!/usr/bin/env bash
# Report 003: MNIST CNN on 8x H100: baseline, DDP, DataParallel, loader workers
# Runs the report's model, hyperparameters and modes here (sim backend, and MPI on this CPU), predicts
# them on the report's hardware with the overhead model, and writes one table and one plot
# (examples/reports/reports.py does the work; docs/reports.md reads the results).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
report_main 003 "MNIST CNN on 8x H100: baseline, DDP, DataParallel, loader workers" "$@"
