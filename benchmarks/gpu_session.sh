#!/usr/bin/env bash
# One prepared session on a CUDA machine (under 10 minutes on one H100/H200): the device check
# with its JSON rows, then the HPG round benchmark (the scaling with R on the GPU, and the
# low-rank step against the dense eigh path). Every output goes to ${OUT:-gpu_session}/.
#
#     bash benchmarks/gpu_session.sh            # python from PATH, or PYTHON=.venv/bin/python
set -u
PYTHON=${PYTHON:-python}
OUT=${OUT:-gpu_session}
mkdir -p "$OUT"
"$PYTHON" -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))" \
    | tee "$OUT/device.txt"
# 1. every learner config against the CPU, placement, throughput (about 5 minutes)
timeout 360 "$PYTHON" -m torchroute.devicecheck --device cuda --rounds 300 \
    --per-case-seconds 60 --json "$OUT/devicecheck.json" 2>&1 | tee "$OUT/devicecheck.txt"
echo "devicecheck exit status: ${PIPESTATUS[0]}" | tee -a "$OUT/devicecheck.txt"
# 2. HPG: time per round at R = 1 and R = 256 (goal: at most 4x), then d up to 1024 at R = 256
timeout 90 "$PYTHON" benchmarks/hpg_round.py --device cuda --scaling 1,256 --dims 64,768 \
    --min-time 0.3 2>&1 | tee "$OUT/hpg_scaling.txt"
timeout 120 "$PYTHON" benchmarks/hpg_round.py --device cuda --trials 256 --min-time 0.3 \
    2>&1 | tee "$OUT/hpg_round.txt"
