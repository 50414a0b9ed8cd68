#!/usr/bin/env bash
# Report 001: LeNet on CIFAR-10, batch 4, one T4: DataParallel on one GPU and the 4-GPU estimate
# Runs the report's model, hyperparameters and modes here (sim backend, and MPI on this CPU), predicts
# them on the report's hardware with the overhead model, and writes one table and one plot
# (examples/reports/reports.py does the work; docs/reports.md reads the results).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
report_main 001 "LeNet on CIFAR-10, batch 4, one T4: DataParallel on one GPU and the 4-GPU estimate" "$@"
