#!/usr/bin/env bash
# Optional: create the real PyTorch environments some tests inspect (tests/probes/test_python_envs.py).
# Only where the torch wheels lie on local disk (this kind of machine: /opt/wheels, /opt/pypi-more);
# elsewhere it does nothing and those tests skip. Safe to run twice: existing environments are kept.
set -u
dest="${DL_DOCTOR_TEST_ENVS:-$HOME/.cache/dl-doctor-test-envs}"
mkdir -p "$dest"
free_gb=$(df -Pk "$dest" | awk 'NR==2 {print int($4/1024/1024)}')

make_env() {  # name, pip requirement, wheel that must be on disk, GiB needed
  local name=$1 req=$2 wheel=$3 need=$4
  if [ -x "$dest/$name/bin/python" ] && "$dest/$name/bin/python" -c 'import torch' 2>/dev/null; then
    echo "test env $name: present"; return 0
  fi
  if ! ls $wheel >/dev/null 2>&1; then echo "test env $name: no local wheel ($wheel); skipped"; return 0; fi
  if [ "$free_gb" -lt "$need" ]; then echo "test env $name: only ${free_gb} GiB free; skipped"; return 0; fi
  rm -rf "$dest/$name"
  python3 -m venv "$dest/$name" && timeout 900 "$dest/$name/bin/pip" install -q "$req" >"$dest/$name.log" 2>&1 \
    && echo "test env $name: created" || { echo "test env $name: install failed (see $dest/$name.log)"; rm -rf "$dest/$name"; }
}

make_env torch-2.13.0-cpu "torch==2.13.0" "/opt/wheels/torch-2.13.0+cpu-*.whl" 3
make_env torch-2.14.1-cu130 "torch==2.14.1" "/opt/pypi-more/files/torch-2.14.1-*.whl" 12
exit 0
