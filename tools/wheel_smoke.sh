#!/usr/bin/env bash
# Build the wheel, install it into a fresh venv (torch first, as the Makefile does) and run
# the first commands a user runs, from a temporary folder outside the checkout.
# Usage: tools/wheel_smoke.sh [VENV]   (TORCH_SPEC picks the torch build; default torch==2.13.0)
# Without VENV the venv (about 2 GB with torch) is made in a temporary folder and removed at
# the end, as the build and work folders are; a VENV given is the caller's and is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
OWN_VENV_DIR=""
DIST=$(mktemp -d)
WORK=$(mktemp -d)
trap 'rm -rf "$DIST" "$WORK" ${OWN_VENV_DIR:+"$OWN_VENV_DIR"}' EXIT
if [ $# -ge 1 ]; then
  VENV=$1
else
  OWN_VENV_DIR=$(mktemp -d)
  VENV=$OWN_VENV_DIR/venv
fi
before=$(git status --porcelain --ignored | grep -v '^!! .venv/$' || true)

export PIP_RETRIES=${PIP_RETRIES:-10} PIP_RESUME_RETRIES=${PIP_RESUME_RETRIES:-10}
# pip install, tried three times: a download cut off mid-way starts afresh
pip_install() {
  local attempt
  for attempt in 1 2 3; do
    "$VENV/bin/python" -m pip install -q "$@" && return 0
    echo "wheel_smoke: pip install failed (attempt $attempt of 3)"; sleep 20
  done
  return 1
}

test -x "$VENV/bin/python" || python3 -m venv "$VENV"
pip_install --upgrade pip
pip_install "$TORCH_SPEC"
# pip must build and install the checkout without a warning
# (tried three times as well: the isolated build environment downloads the build backend)
built=no
for attempt in 1 2 3; do
  if "$VENV/bin/python" -m pip wheel -q --no-deps -w "$DIST" "$ROOT" 2>"$DIST/build.log"; then
    built=yes; break
  fi
  echo "wheel_smoke: pip wheel failed (attempt $attempt of 3)"; sleep 20
done
[ "$built" = yes ] || { cat "$DIST/build.log"; exit 1; }
# (pip's own notes on the network, a retried or resumed download, are not the build's)
if grep -i -E "warning|deprecat" "$DIST/build.log" \
  | grep -v -E "Retrying \(|resume incomplete download|Connection interrupted|Location '.*' is ignored"; then
  echo "wheel_smoke: the build printed warnings"; exit 1
fi
pip_install "$DIST"/torchroute-*.whl
pip_install --force-reinstall --no-deps "$DIST"/torchroute-*.whl
after=$(git status --porcelain --ignored | grep -v '^!! .venv/$' || true)
if [ "$before" != "$after" ]; then
  echo "wheel_smoke: the build left files in the checkout:"; diff <(echo "$before") <(echo "$after") || true
  exit 1
fi

cd "$WORK"
export HF_HUB_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
TR="$VENV/bin/torchroute"
"$TR" --help >/dev/null
"$TR" simulate --help | grep -q "experiment presets"
"$TR" simulate rounds=20 seeds=[0] rhos=[0,500] '~logger' out_dir=out
test -s out/results.csv
cat > table.csv <<'CSV'
query_id,arm,score,cost,text,split
q1,big,1.0,0.003,What is 2+2?,train
q1,small,0.0,0.0001,What is 2+2?,train
q2,big,1.0,0.003,Name a prime.,test
q2,small,1.0,0.0001,Name a prime.,test
CSV
"$TR" data inspect table.csv
"$TR" report out >/dev/null
"$TR" sweep --help >/dev/null && "$TR" gap --help >/dev/null && "$TR" pretrain --help >/dev/null
echo "wheel_smoke: ok ($("$VENV/bin/python" -c 'import torchroute, sys; print(torchroute.__file__)'))"
