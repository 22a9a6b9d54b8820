#!/usr/bin/env bash
# Optional: real framework wheels from PyPI in throw-away environments, for tests/probes/test_consumers_real.py (and a
# working JAX for tests/probes/test_verify.py).
# Each is installed without its dependencies (the point is what the loader finds when the CUDA wheels are absent),
# and torch-ort-cu130 is the torch 2.14.1 cu130 environment (setup_torch_envs.sh; hard-linked copy) plus a CUDA 13
# onnxruntime-gpu. Wheels are kept in $DL_DOCTOR_WHEELS between runs. Where PyPI or the disk is not available,
# nothing is made and those tests skip. Safe to run twice: existing environments are kept.
set -u
dest="${DL_DOCTOR_TEST_ENVS:-$HOME/.cache/dl-doctor-test-envs}"
wheels="${DL_DOCTOR_WHEELS:-$HOME/.cache/dl-doctor-wheels}"
mkdir -p "$dest" "$wheels"
free_gb=$(df -Pk "$dest" | awk 'NR==2 {print int($4/1024/1024)}')
if [ "$free_gb" -lt 4 ]; then echo "framework envs: only ${free_gb} GiB free; skipped"; exit 0; fi

fetch() {  # requirement...: into the wheel cache, once
  timeout 600 python3 -m pip download -q --no-deps --only-binary :all: -d "$wheels" "$@" >/dev/null 2>&1
}

make_env() {  # name, requirement, [base env to copy]
  local name=$1 req=$2 base=${3:-}
  local dist=${req%%==*}
  if [ -f "$dest/$name/.complete" ]; then echo "framework env $name: present"; return 0; fi
  if ! fetch "$req"; then echo "framework env $name: $req not downloadable; skipped"; return 0; fi
  rm -rf "$dest/$name"
  if [ -n "$base" ]; then
    [ -x "$dest/$base/bin/python" ] || { echo "framework env $name: no $base env; skipped"; return 0; }
    cp -al "$dest/$base" "$dest/$name" || { rm -rf "$dest/$name"; return 0; }
  else
    python3 -m venv --without-pip "$dest/$name" || return 0
  fi
  if python3 -m pip --python "$dest/$name/bin/python" install -q --no-deps --no-index --find-links "$wheels" "$req" \
      >"$dest/$name.log" 2>&1; then
    touch "$dest/$name/.complete"; echo "framework env $name: created"
  else
    echo "framework env $name: install failed (see $dest/$name.log)"; rm -rf "$dest/$name"
  fi
}

make_env_with_deps() {  # name, requirement...: a working environment (dependencies included), e.g. for dl-doctor verify
  local name=$1; shift
  if [ -f "$dest/$name/.complete" ]; then echo "framework env $name: present"; return 0; fi
  if ! timeout 600 python3 -m pip download -q --only-binary :all: -d "$wheels" "$@" >/dev/null 2>&1; then
    echo "framework env $name: $* not downloadable; skipped"; return 0
  fi
  rm -rf "$dest/$name"
  python3 -m venv --without-pip "$dest/$name" || return 0
  if python3 -m pip --python "$dest/$name/bin/python" install -q --no-index --find-links "$wheels" "$@" \
      >"$dest/$name.log" 2>&1; then
    touch "$dest/$name/.complete"; echo "framework env $name: created"
  else
    echo "framework env $name: install failed (see $dest/$name.log)"; rm -rf "$dest/$name"
  fi
}

make_env ort-1.22.0-cu12 "onnxruntime-gpu==1.22.0"
make_env cupy-14.2.0-cu12 "cupy-cuda12x==14.2.0"
make_env ct2-4.8.5 "ctranslate2==4.8.5"
make_env torch-ort-cu130 "onnxruntime-gpu==1.31.1" torch-2.14.1-cu130
make_env torch-ort12-cu130 "onnxruntime-gpu==1.22.0" torch-2.14.1-cu130
# JAX on the CPU (jaxlib's CPU wheel, ~135 MB with numpy and scipy) for dl-doctor verify's JAX workload
make_env_with_deps jax-0.10.2-cpu "jax==0.10.2" "jaxlib==0.10.2"
exit 0
