#!/usr/bin/env bash
# Report 004: ResNet-18 on random 3x224x224, batch 256: DataParallel vs DDP, traffic per step
# Runs the report's model, hyperparameters and modes here (sim backend, and MPI on this CPU), predicts
# them on the report's hardware with the overhead model, and writes one table and one plot
# (examples/reports/reports.py does the work; docs/reports.md reads the results).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
report_main 004 "ResNet-18 on random 3x224x224, batch 256: DataParallel vs DDP, traffic per step" "$@"
