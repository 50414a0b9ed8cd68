#!/usr/bin/env bash
# Report 002: MNIST, DDP on 1/2/4/8 RTX 3090 (NCCL) and Gloo
# Runs the report's model, hyperparameters and modes here (sim backend, and MPI on this CPU), predicts
# them on the report's hardware with the overhead model, and writes one table and one plot
# (examples/reports/reports.py does the work; docs/reports.md reads the results).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
report_main 002 "MNIST, DDP on 1/2/4/8 RTX 3090 (NCCL) and Gloo" "$@"
